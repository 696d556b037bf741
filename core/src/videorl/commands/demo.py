"""``videorl demo``: the README's main job — a tiny model learns a video task with GRPO on CPU."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import click

from videorl import demo
from videorl.errors import VideorlError
from videorl.plugins import Plugins


@click.command("demo")
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), default=Path("runs/demo"), show_default=True
)
@click.option(
    "--task",
    type=click.Choice(demo.TASK_NAMES),
    default=demo.DEFAULT_TASK,
    show_default=True,
    help="colour: the colour of the square (one frame answers it); order: the colour it shows first "
    "(only the order of the frames answers it); seek: the colour that flashes in a window of a 32 s "
    "clip the prompt's 4 frames never show (the policy must call get_frames on it).",
)
@click.option("--steps", type=int, default=150, show_default=True, help="GRPO steps.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--train-clips", type=click.IntRange(1), default=96, show_default=True, help="Training clips.")
@click.option("--val-clips", type=click.IntRange(1), default=64, show_default=True, help="Held-out clips.")
@click.option("--family", default="qwen2_5_vl", show_default=True, help="Model family of the tiny model.")
@click.option("--engine", default="hf", show_default=True, help="Rollout engine (hf or vllm).")
@click.option("--lora", is_flag=True, help="Train LoRA adapters (actor.lora) instead of every weight.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="End with one JSON line on stdout: heldout_before, heldout_after, control_after (null: no "
    "control), minutes; the report goes to stderr.",
)
@click.argument("overrides", nargs=-1, metavar="[KEY=VALUE]...")
@click.pass_obj
def demo_command(
    plugins: Plugins,
    out: Path,
    task: str,
    steps: int,
    seed: int,
    train_clips: int,
    val_clips: int,
    family: str,
    engine: str,
    lora: bool,
    as_json: bool,
    overrides: tuple[str, ...],
) -> None:
    """Build a tiny model and synthetic videos, cache them, train with GRPO, report accuracy.

    The tasks ask about a square moving in a 4-frame clip (multiple choice, chance 0.25). The held-out
    clips are also scored with their frames reversed (the control, same answers): a model that reads
    the order falls to 0 there. The seek task trains a tool-using policy (get_frames); its control is
    the same policy with the tool blind. The run uses the same code path as `videorl train`; its config,
    metrics, checkpoints and the curve PNG land in OUT/run.
    """

    start = time.monotonic()
    try:
        result = demo.run(
            out, plugins, steps=steps, seed=seed, family=family, engine=engine, extra=overrides, task=task,
            lora=lora, train_clips=train_clips, val_clips=val_clips,
        )  # fmt: skip
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from None
    minutes = (time.monotonic() - start) / 60
    control = "tool blind" if task == demo.SEEK else "reversed control"
    what = (
        "(the same clips through the tool loop, the tool serving the overview's frames only)"
        if task == demo.SEEK
        else "(the same clips, frames reversed, scored against their original answers)"
    )
    report = [
        f"held-out accuracy: {result.before:.3f} before training -> {result.after:.3f} after {steps} steps",
        f"{control}: {result.control_before:.3f} before training -> {result.control_after:.3f} {what}",
        f"run directory: {result.run_dir} ({minutes:.1f} min)",
        *([f"curves: {result.curve}"] if result.curve is not None else []),
    ]
    for line in report:
        click.echo(line, err=as_json)
    if as_json:
        control_after = None if math.isnan(result.control_after) else result.control_after
        figures = {"heldout_before": result.before, "heldout_after": result.after,
                "control_after": control_after, "minutes": round(minutes, 2)}  # fmt: skip
        click.echo(json.dumps(figures))
