"""The demo task: a tiny model learns, with GRPO on CPU, the colour of a square moving in a video.

Everything is made locally: a tiny random model of a real family (its backend's ``build_tiny``),
short H.264 clips written with PyAV, a dataset in the EasyVideoR1 schema, the frame cache. Training
then runs the same ``videorl train`` code path users run (:func:`videorl.train.compose.build_training`).
The answer depends on the pixels only: the question and the option order never change and the four
colours are balanced, so chance is 0.25. Mix-policy bootstraps the answer format: the last slot of
each group holds the sample's offline answer ``<answer>X</answer>``, since a random policy almost never
writes the tags by itself (``../shared/reference/cpu-stack.md`` §9 sized this task).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from videorl.config import TrainConfig
    from videorl.plugins import Plugins

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 190, 60),
    "blue": (40, 70, 230),
    "white": (235, 235, 235),  # each pair of colours differs in two channels (yellow vs red: one, not learnt)
}
QUESTION = "What colour is the square?"
OPTIONS = [f"{letter}. {name}" for letter, name in zip("ABCD", COLOURS)]
SIDE, SQUARE, FRAMES, FPS = 56, 24, 4, 2.0
WIDTH = 128  # text hidden size of the tiny model (vision 64): width 64 does not learn the colour here
PROMPT = "{{ problem }}\n{{ options | join('\\n') }}\n"  # the demo's data.prompt_template: short prompts


def clip_frames(colour: str, rng: random.Random) -> list[Any]:
    """``FRAMES`` RGB frames of a square of ``colour`` moving slowly over a dark, noisy background."""
    import numpy as np

    x, y = rng.randrange(0, SIDE - SQUARE), rng.randrange(0, SIDE - SQUARE)
    dx, dy = rng.choice([-3, 3]), rng.choice([-3, 3])
    noise = np.random.default_rng(rng.randrange(2**32))
    frames = []
    for _ in range(FRAMES):
        frame = noise.integers(0, 40, size=(SIDE, SIDE, 3), dtype=np.uint8)
        frame[y : y + SQUARE, x : x + SQUARE] = COLOURS[colour]
        frames.append(frame)
        x = min(max(x + dx, 0), SIDE - SQUARE)
        y = min(max(y + dy, 0), SIDE - SQUARE)
    return frames


def write_task(out: Path, count: int, *, seed: int, split: str) -> Path:
    """Write ``count`` clips (colours balanced) and their dataset JSONL; return the JSONL path."""
    from videorl.media.synthetic import write_video

    rng = random.Random(f"{seed}-{split}")
    names = list(COLOURS)
    colours = [names[i % len(names)] for i in range(count)]
    rng.shuffle(colours)
    clips = out / "clips"
    clips.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, colour in enumerate(colours):
        path = clips / f"{split}-{i:04d}.mp4"
        write_video(path, clip_frames(colour, rng), fps=FPS)
        letter = "ABCD"[names.index(colour)]
        rows.append(
            {
                "id": f"{split}-{i:04d}",
                "data_type": "video",
                "problem_type": "multiple choice",
                "problem": QUESTION,
                "options": OPTIONS,
                "answer": letter,
                "videos": [f"clips/{path.name}"],
                "offline_output": f"<answer>{letter}</answer>",
            }
        )
    dataset = out / f"{split}.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return dataset


def demo_overrides(out: Path, model: Path, train: Path, val: Path, *, steps: int, seed: int, engine: str) -> list[str]:
    """The demo's settings, as the ``key=value`` overrides a user would pass to ``videorl train``."""
    pixels = SIDE * SIDE
    return [
        f"seed={seed}",
        f"output_dir={out / 'run'}",
        f"model.path={model}",
        "model.dtype=float32",
        f"data.train_files=[{train}]",
        f"data.val_files=[{val}]",
        f"data.cache_dir={out / 'cache'}",
        "data.source_mode=preprocessed_only",
        f"data.video_fps={FPS}",
        f"data.video_max_frames={FRAMES}",
        f"data.video_min_pixels={pixels}",
        f"data.video_max_pixels={pixels}",
        "data.max_prompt_length=512",
        "data.rollout_batch_size=16",
        "data.thinking=false",
        f"data.prompt_template={out / 'prompt.jinja'}",
        f"rollout.engine={engine}",
        "rollout.n=8",
        "rollout.max_response_length=8",
        "rollout.enable_mix_policy=true",
        "actor.global_batch_size=16",
        "actor.gradient_checkpointing=false",
        "optim.lr=1e-3",
        "optim.weight_decay=0.0",
        f"trainer.max_steps={steps}",
        f"trainer.save_every={max(steps // 3, 1)}",
        "trainer.keep_last=2",
        f"trainer.val_every={max(steps // 6, 1)}",
        "trainer.loggers=[jsonl]",
    ]


@dataclass
class DemoResult:
    before: float
    after: float
    run_dir: Path
    curve: Path | None


def prepare(out: Path, plugins: Plugins, *, family: str, seed: int, train: int, val: int) -> tuple[Path, Path, Path]:
    """Build the tiny model, the clips and datasets, and cache the clips; idempotent per ``out``."""
    from videorl.media import DecodeParams, build_cache

    backend_cls = plugins.model_backends.get(family)
    model = out / "model"
    if not (model / "config.json").is_file():
        backend_cls.build_tiny(model, seed=seed, width=WIDTH)
    (out / "prompt.jinja").write_text(PROMPT, encoding="utf-8")
    train_file = write_task(out, train, seed=seed, split="train")
    val_file = write_task(out, val, seed=seed, split="val")
    params = DecodeParams(
        factor=backend_cls.factor, temporal_patch_size=backend_cls.temporal_patch_size, fps=FPS,
        max_frames=FRAMES, min_pixels=SIDE * SIDE, max_pixels=SIDE * SIDE,
    )
    report = build_cache(sorted((out / "clips").glob("*.mp4")), params, out / "cache", workers=2, progress=False)
    if report.failures:
        raise RuntimeError(f"caching the demo clips failed: {report.failures[:3]}")
    return model, train_file, val_file


def run(
    out: Path, plugins: Plugins, *, steps: int = 150, seed: int = 0, family: str = "qwen2_5_vl",
    engine: str = "hf", train_clips: int = 96, val_clips: int = 64, extra: Sequence[str] = (),
) -> DemoResult:
    """Prepare, train, and report held-out accuracy before and after (greedy, exact letter)."""
    from videorl.config import load_config
    from videorl.grpo import evaluate, local_scorer
    from videorl.train.compose import build_training

    out.mkdir(parents=True, exist_ok=True)
    model, train_file, val_file = prepare(out, plugins, family=family, seed=seed, train=train_clips, val=val_clips)
    overrides = demo_overrides(out, model, train_file, val_file, steps=steps, seed=seed, engine=engine)
    config: TrainConfig = load_config(None, [*overrides, *extra])
    training = build_training(config, plugins)
    max_tokens = config.rollout.max_response_length
    scorer = local_scorer(training.rewards, training.actor.backend)
    before = evaluate(training.validation, training.engine, scorer, max_tokens)
    training.run()
    after = evaluate(training.validation, training.engine, scorer, max_tokens)
    curve = _plot(Path(config.output_dir))
    return DemoResult(before["val/accuracy/overall"], after["val/accuracy/overall"], Path(config.output_dir), curve)


def _plot(run_dir: Path) -> Path | None:
    from videorl.atomic import atomic_write_bytes
    from videorl.commands.plot import curves, render
    from videorl.train.metrics import METRICS_FILE, read_metrics

    try:
        png = render(curves(read_metrics(run_dir / METRICS_FILE)), title="videorl demo: colour of the square")
    except ImportError:
        return None
    target = run_dir / "curves.png"
    atomic_write_bytes(target, png)
    return target
