"""``videorl demo``: the README's main job — a tiny model learns a video task with GRPO on CPU."""

from __future__ import annotations

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
    type=click.Choice(["order", "colour"]),
    default="order",
    show_default=True,
    help="colour: the colour of the square (one frame answers it); order: the colour it shows first "
    "(only the order of the frames answers it).",
)
@click.option("--steps", type=int, default=150, show_default=True, help="GRPO steps.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--family", default="qwen2_5_vl", show_default=True, help="Model family of the tiny model.")
@click.option("--engine", default="hf", show_default=True, help="Rollout engine (hf or vllm).")
@click.option("--lora", is_flag=True, help="Train LoRA adapters (actor.lora) instead of every weight.")
@click.argument("overrides", nargs=-1, metavar="[KEY=VALUE]...")
@click.pass_obj
def demo_command(
    plugins: Plugins,
    out: Path,
    task: str,
    steps: int,
    seed: int,
    family: str,
    engine: str,
    lora: bool,
    overrides: tuple[str, ...],
) -> None:
    """Build a tiny model and synthetic videos, cache them, train with GRPO, report accuracy.

    The tasks ask about a square moving in a 4-frame clip (multiple choice, chance 0.25). The held-out
    clips are also scored with their frames reversed (the control, same answers): a model that reads
    the order falls to 0 there. The run uses the same code path as `videorl train`; its config,
    metrics, checkpoints and the curve PNG land in OUT/run.
    """

    start = time.monotonic()
    try:
        result = demo.run(
            out, plugins, steps=steps, seed=seed, family=family, engine=engine, extra=overrides, task=task,
            lora=lora,
        )  # fmt: skip
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from None
    minutes = (time.monotonic() - start) / 60
    click.echo(
        f"held-out accuracy: {result.before:.3f} before training -> {result.after:.3f} after {steps} steps"
    )
    click.echo(
        f"reversed control:  {result.control_before:.3f} before training -> {result.control_after:.3f} "
        "(the same clips, frames reversed, scored against their original answers)"
    )
    click.echo(f"run directory: {result.run_dir} ({minutes:.1f} min)")
    if result.curve is not None:
        click.echo(f"curves: {result.curve}")
