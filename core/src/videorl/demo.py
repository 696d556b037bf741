"""The demo tasks: a tiny model learns, with GRPO on CPU, a question about a square moving in a video.

Everything is made locally: a tiny random model of a real family (its backend's ``build_tiny``),
short H.264 clips written with PyAV, a dataset in the EasyVideoR1 schema, the frame cache. Training
then runs the same ``videorl train`` code path users run (:func:`videorl.train.compose.build_training`).
Two tasks (:data:`TASKS`): ``colour``, the colour of the square (any one frame answers it), and
``order``, the colour the square shows first when it changes colour half-way (only the order of the
frames answers it); a third, ``seek`` (:mod:`videorl.demo_seek`), trains a tool-using policy. The
answer depends on the pixels only: the question and the option order never change and the answers
are balanced, so chance is 0.25. Every run is also scored on a control: the
held-out clips with their frames reversed, still asking for the original answer; a model that reads
the order falls to 0 there, one that ignores it scores as on the ordered clips. Mix-policy bootstraps
the answer format: the last slot of each group holds the sample's offline answer ``<answer>X</answer>``,
since a random policy almost never writes the tags by itself (``../shared/reference/cpu-stack.md`` §9
sized the colour task).

How the order reaches the model (Qwen2.5-VL): the 4 frames make 2 temporal patches; the vision tower
encodes each patch alone, with no time position, so the order between them is carried by the LLM
alone: the patches' place in the token sequence (causal attention) and the M-RoPE time axis (t = 0, 2).
With that axis flattened to 0 the order task still reaches 0.94 held-out, 0.28 reversed (1.00, 0.00
with it): the control catches frames that arrive out of order, not a broken time axis on its own.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl import demo_seek
from videorl.atomic import atomic_write_bytes
from videorl.runs.history import read_metrics
from videorl.runs.plot import algorithm_name, curves, render
from videorl.runs.records import METRICS_FILE

if TYPE_CHECKING:
    from videorl.config import TrainConfig
    from videorl.plugins import Plugins
    from videorl.train.compose import Training

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 190, 60),
    "blue": (40, 70, 230),
    "white": (235, 235, 235),  # each pair of colours differs in two channels (yellow vs red: one, not learnt)
}
QUESTION = "What colour is the square?"
OPTIONS = [f"{letter}. {name}" for letter, name in zip("ABCD", COLOURS)]
SIDE, SQUARE, FRAMES, FPS = 56, 24, 4, 2.0
#: the demo's visual budget (every frame at its full 56×56), as ``data.*`` keys: the run's overrides and
#: the frame cache :func:`prepare` builds, through the same conversion as training's encoder
BUDGET: dict[str, Any] = {"video_fps": FPS, "video_max_frames": FRAMES, "video_min_pixels": SIDE * SIDE,
                          "video_max_pixels": SIDE * SIDE}  # fmt: skip
WIDTH = 128  # text hidden size of the tiny model (vision 64): width 64 does not learn the colour here
PROMPT = "{{ problem }}\n{{ options | join('\\n') }}\n"  # the demo's data.prompt_template: short prompts
REVERSED = "reversed"  # the control split's suffix and its curve's name
SCORES = "scores.jsonl"  # in the demo's folder: held-out and control scores, one row per validation


@dataclass(frozen=True)
class Task:
    """A demo task: its question, and how many of the ``FRAMES`` frames show the first colour (the
    answer) before the square turns to a second one (``FRAMES``: it never changes)."""

    question: str
    title: str
    first_frames: int
    square: int = SQUARE

    def schedule(self, i: int) -> tuple[str, ...]:
        """The colours of clip ``i``, frame by frame: its first colour cycles through :data:`COLOURS`
        (balanced answers), its second through the three others."""
        names = list(COLOURS)
        first = names[i % len(names)]
        second = names[(i + 1 + (i // len(names)) % (len(names) - 1)) % len(names)]
        return (first,) * self.first_frames + (second,) * (FRAMES - self.first_frames)


TASKS: dict[str, Task] = {
    "colour": Task(QUESTION, "colour of the square", first_frames=FRAMES),
    # order: a 40-pixel square (most of each 28-pixel token, in every frame). With the colour task's 24
    # pixels GRPO learns which two colours are shown but not their order (held-out 0.52, reversed 0.17
    # after 300 steps on 192 clips); at 40 pixels it learns the order in about 50 steps.
    "order": Task(
        "Which colour does the square show first?",
        "which colour the square shows first",
        first_frames=2,
        square=40,
    ),
}
DEFAULT_TASK = "order"  # what `videorl demo` (make demo) runs: the quicker task, answered by the order
SEEK = "seek"  # the tool task (:mod:`videorl.demo_seek`): the answer lies where the overview never looks
TASK_NAMES = (*TASKS, SEEK)


def clip_frames(colours: str | Sequence[str], rng: random.Random, *, square: int = SQUARE) -> list[Any]:
    """RGB frames of a ``square``-pixel square moving slowly over a dark, noisy background: ``FRAMES``
    frames of one colour, or one frame per entry of a sequence of colours."""
    import numpy as np

    schedule = [colours] * FRAMES if isinstance(colours, str) else list(colours)
    x, y = rng.randrange(0, SIDE - square), rng.randrange(0, SIDE - square)
    dx, dy = rng.choice([-3, 3]), rng.choice([-3, 3])
    noise = np.random.default_rng(rng.randrange(2**32))
    frames = []
    for colour in schedule:
        frame = noise.integers(0, 40, size=(SIDE, SIDE, 3), dtype=np.uint8)
        frame[y : y + square, x : x + square] = COLOURS[colour]
        frames.append(frame)
        x = min(max(x + dx, 0), SIDE - square)
        y = min(max(y + dy, 0), SIDE - square)
    return frames


def write_task(
    out: Path, count: int, *, seed: int, split: str, task: str = "colour", reverse: bool = False
) -> Path:
    """Write ``count`` clips of ``task`` (answers balanced) and their dataset JSONL; return its path.

    ``reverse``: the same clips as without it, each with its frames in reverse order and the same
    answer, as the split ``<split>-reversed`` (the control).
    """
    from videorl.media.synthetic import write_video

    spec = TASKS[task]
    rng = random.Random(f"{seed}-{split}")
    order = list(range(count))
    rng.shuffle(order)
    name = f"{split}-{REVERSED}" if reverse else split
    clips = out / "clips"
    clips.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, k in enumerate(order):
        schedule = spec.schedule(k)
        frames = clip_frames(schedule, rng, square=spec.square)
        path = clips / f"{name}-{i:04d}.mp4"
        write_video(path, frames[::-1] if reverse else frames, fps=FPS)
        letter = "ABCD"[list(COLOURS).index(schedule[0])]
        rows.append(
            {
                "id": f"{name}-{i:04d}",
                "data_type": "video",
                "problem_type": "multiple choice",
                "problem": spec.question,
                "options": OPTIONS,
                "answer": letter,
                "videos": [f"clips/{path.name}"],
                "offline_output": f"<answer>{letter}</answer>",
            }
        )
    dataset = out / f"{name}.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return dataset


def demo_overrides(
    out: Path, model: Path, train: Path, val: Path, *, steps: int, seed: int, engine: str
) -> list[str]:
    """The demo's settings, as the ``key=value`` overrides a user would pass to ``videorl train``."""
    return [
        f"seed={seed}",
        f"output_dir={out / 'run'}",
        f"model.path={model}",
        "model.dtype=float32",
        f"data.train_files=[{train}]",
        f"data.val_files=[{val}]",
        f"data.cache_dir={out / 'cache'}",
        "data.source_mode=preprocessed_only",
        *(f"data.{key}={value}" for key, value in BUDGET.items()),
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


#: ``videorl demo --lora``: rank-16 adapters instead of full fine-tuning. The tiny model is random: its
#: frozen final norm and LM head keep its logits near uniform (with adapters on the decoder layers alone
#: the entropy was still 6.0 nats after 100 steps, ln 448 = 6.1), so the LM head gets an adapter too;
#: the adapters take a 5x higher lr than full fine-tuning.
LORA_OVERRIDES = (
    "actor.lora.enabled=true",
    "actor.lora.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj,lm_head]",
    "optim.lr=5e-3",
)


@dataclass
class DemoResult:
    before: float
    after: float
    run_dir: Path
    curve: Path | None
    control_before: float = float("nan")  # held-out accuracy on the reversed clips
    control_after: float = float("nan")


def prepare(
    out: Path, plugins: Plugins, *, family: str, seed: int, train: int, val: int, task: str = "colour"
) -> tuple[Path, Path, Path]:
    """Build the tiny model, the clips and datasets (with the reversed control of the held-out
    clips, ``val-reversed.jsonl``, except for ``seek``), and cache the clips (their prompt's frames);
    idempotent per ``out`` and task."""
    from videorl.config import DataConfig
    from videorl.media import DecodeParams, build_cache

    backend_cls = plugins.model_backends.get(family)
    model = out / "model"
    if not (model / "config.json").is_file():
        backend_cls.build_tiny(model, seed=seed, width=WIDTH)
    (out / "prompt.jinja").write_text(PROMPT, encoding="utf-8")
    if task == SEEK:
        train_file, val_file = (
            demo_seek.write_seek(out, count, seed=seed, split=split, colours=COLOURS, options=OPTIONS)
            for count, split in ((train, "train"), (val, "val"))
        )
    else:
        train_file = write_task(out, train, seed=seed, split="train", task=task)
        val_file = write_task(out, val, seed=seed, split="val", task=task)
        write_task(out, val, seed=seed, split="val", task=task, reverse=True)
    backend = plugins.model_backends.create(family, path=model)
    budget = DataConfig(**BUDGET).visual_budget(backend.budget)  # as compose.make_encoder resolves it
    params = DecodeParams.from_budget(
        budget, factor=backend.factor, temporal_patch_size=backend.temporal_patch_size
    )
    report = build_cache(
        sorted((out / "clips").glob("*.mp4")), params, out / "cache", workers=2, progress=False
    )
    if report.failures:
        raise RuntimeError(f"caching the demo clips failed: {report.failures[:3]}")
    return model, train_file, val_file


def run(
    out: Path,
    plugins: Plugins,
    *,
    steps: int = 150,
    seed: int = 0,
    family: str = "qwen2_5_vl",
    engine: str = "hf",
    train_clips: int = 96,
    val_clips: int = 64,
    extra: Sequence[str] = (),
    task: str = DEFAULT_TASK,
    lora: bool = False,
) -> DemoResult:
    """Prepare, train, and report held-out accuracy before and after (greedy, exact letter), and on
    the control (:func:`_scorers`); ``lora``: train LoRA adapters (:data:`LORA_OVERRIDES`, before
    ``extra``)."""
    from videorl.config import load_config
    from videorl.train.compose import build_training

    out.mkdir(parents=True, exist_ok=True)
    model, train_file, val_file = prepare(
        out, plugins, family=family, seed=seed, train=train_clips, val=val_clips, task=task
    )
    overrides = demo_overrides(out, model, train_file, val_file, steps=steps, seed=seed, engine=engine)
    task_overrides = demo_seek.OVERRIDES if task == SEEK else ()
    config: TrainConfig = load_config(
        None, [*overrides, *task_overrides, *(LORA_OVERRIDES if lora else ()), *extra]
    )
    training = build_training(config, plugins)
    score = _scorers(out, task, config, training)

    # step 0 on the curves: the untrained model, with every curve a validation step draws (the reward and
    # accuracy panels show the same points)
    rows: list[dict[str, Any]] = []
    scores = out / SCORES  # the rows as they come: a long run can be watched (and the plot redrawn)

    def add_row(step: int) -> dict[str, float]:
        found = score(step)
        row = {"step": max(step, 0) if step >= 0 else config.trainer.max_steps, **found}
        with scores.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        if step >= 0:
            rows.append(row)
        return found

    add_row(0)

    def score_control(step: int, metrics: dict[str, float]) -> None:
        if "val/accuracy/overall" in metrics:  # a validation step: score the control alongside
            add_row(step)

    training.run(on_step=score_control)
    final = add_row(-1)
    heldout, control = (f"val/accuracy/{name}" for name in _curve_names(task))
    run_dir = Path(config.output_dir)
    spec_title = "which colour flashes where the mark points" if task == SEEK else TASKS[task].title
    title = f"videorl demo: {spec_title} ({algorithm_name(vars(config.algorithm)) or 'grpo'})"
    curve = _plot(run_dir, rows, title=title)
    return DemoResult(rows[0][heldout], final[heldout], run_dir, curve, rows[0][control], final[control])


def _curve_names(task: str) -> tuple[str, str]:
    """The names of a task's held-out and control curves (``val/accuracy/<name>``)."""
    return ("tools", "blind") if task == SEEK else ("overall", REVERSED)


def _scorers(
    out: Path, task: str, config: TrainConfig, training: Training
) -> Callable[[int], dict[str, float]]:
    """``score(step)``: the held-out and control accuracy (and reward) of the current policy, as curve
    rows (``step`` 0 adds the run's own validation metrics). The control: for ``order`` and ``colour``
    the held-out clips with their frames reversed; for ``seek`` the held-out clips through the tool loop
    with the tool blind (:func:`videorl.demo_seek.score_with_tools`)."""
    from videorl.rollout.scoring import local_scorer
    from videorl.train.compose import check_cached, load_training_samples
    from videorl.train.step import evaluate

    scorer = local_scorer(training.rewards, training.actor.backend)
    max_tokens = config.rollout.max_response_length

    def validate(prompts: Sequence[Any]) -> dict[str, float]:
        """The ``val/*`` metrics of ``prompts``, as a validation step of the run logs them."""
        return evaluate(prompts, training.engine, scorer, max_tokens, training.rewards.canonical_type)

    if task == SEEK:

        def score_seek(step: int) -> dict[str, float]:
            found = {
                name: demo_seek.score_with_tools(training, training.validation, scorer, tool_frames=frames)
                for name, frames in (("tools", "decode"), ("blind", "prompt"))
            }
            row = {f"val/accuracy/{name}": v["accuracy"] for name, v in found.items()}
            return {**row, "val/calls/tools": found["tools"]["called"]}

        return score_seek

    control_samples = load_training_samples(config, training.rewards, [str(out / f"val-{REVERSED}.jsonl")])
    check_cached(control_samples, training.encode)
    control = [training.encode(s) for s in control_samples]

    def score_reversed(step: int) -> dict[str, float]:
        found = validate(control)
        panels = ("reward", "accuracy")
        row = {f"val/{p}/{REVERSED}": found[f"val/{p}/overall"] for p in panels}
        return {**(validate(training.validation) if step <= 0 else {}), **row}

    return score_reversed


def _plot(run_dir: Path, control_rows: Sequence[dict[str, Any]], *, title: str) -> Path | None:
    """``curves.png`` of the run's metrics with ``control_rows`` (step 0 and the control) merged in."""

    try:
        rows = sorted([*read_metrics(run_dir / METRICS_FILE), *control_rows], key=lambda row: row["step"])
        png = render(curves(rows), title=title)
    except ImportError:
        return None
    target = run_dir / "curves.png"
    atomic_write_bytes(target, png)
    return target
