"""The seed's throughput experiment on CPU: GRPO step time with frames decoded per stage vs cached.

Prints one JSON line. EasyVideoR1 (on EasyR1/veRL) reports, for Qwen3-VL-8B on 32 H200, that
loading frames from its cache instead of decoding the raw video makes a step 1.47× faster (rollout
1.52×, reference forward 2.85×, actor update unchanged, ~4.93M tokens per step in both modes). This
script runs the same comparison with a tiny random Qwen3-VL (patch 16, merge 2, temporal patch 2;
text width 64) through the real training path (``build_training`` + ``Training.run``, hf engine, KL on
so that there is a reference forward) on synthetic H.264 clips made with PyAV.

How EasyR1's per-stage media handling is emulated. In EasyR1 only the video's path (or cache file
name) crosses the Ray boundaries, and every stage that needs pixels gets them again at its point of
use: the dataset decodes to tokenise the prompt, the rollout worker decodes again for vLLM, and the
actor worker decodes again for its forwards, once per prompt and step (it memoises by ``uid``, so the
n responses of a prompt and the later update reuse what its first forward — the reference/log-prob
pass — processed). videorl's own loop encodes a prompt once and hands the tensors on, so the benchmark
wraps the loop's pieces (from its own file; the loop is unchanged) to do what EasyR1 does:

- data:      the run's ``PromptEncoder`` (frames from ``MediaCache.load``, then the processor);
- rollout:   an engine wrapper that re-encodes every prompt from its sample before generating
             (again ``MediaCache.load`` + processor), then generates from the fresh encoding;
- reference: a reference-model wrapper that re-encodes the prompts of its micro-batch (memoised per
             prompt and step, as EasyR1's actor worker does) and runs the reference forward on them;
             the actor's own forwards then reuse the step's encoding, like EasyR1's update.

The two modes differ only in ``data.source_mode``: ``realtime_only`` (the cache decodes the video at
every call: three decodes per prompt and step) and ``preprocessed_only`` (the cache was built first;
every call maps the entry and checks its CRC). Every re-encoding is checked to give the same prompt
ids, and the two modes must produce identical tokens every step (same samples, seed and weights).

Stages, from the loop's ``time/*`` metrics: data = ``time/data``, rollout = ``time/rollout`` (with
reward scoring), reference = ``time/reference``, actor update = ``time/actor`` − ``time/reference``
(the loop times the reference forward inside the update), step = ``time/step``. After an untimed
warm-up run (``--warmup`` steps), each mode runs ``--rounds`` fresh trainings of ``--steps`` steps,
alternated (realtime, preprocessed, realtime, ...) so that a busy neighbour slows both alike; each
stage reports the median over its steps (robust to a step stalled by other processes). ``ratio`` is
the quotient of the medians; ``ratio_same_compute`` uses the fact that both modes compute the same
thing (identical tokens): it pools each stage's time minus its media time over both modes and lets
only the media time (measured around every encoding) differ, which a busy machine's noise cannot blur.

Usage: ``python benchmarks/train_step.py [--prompts 4] [--n 4] [--steps 1] [--rounds 4] [--workdir DIR]``
(defaults: about 3 CPU-minutes; 4.5–5.5 minutes of wall time on 2 busy shared cores).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from videorl.config import TrainConfig
    from videorl.data import Sample
    from videorl.encoding import Prompt, PromptEncoder
    from videorl.model_inputs import EncodedPrompt, ModelInputs
    from videorl.plugins import Plugins
    from videorl.rollout import Completion, RolloutEngine, SamplingParams

MODES = ("realtime_only", "preprocessed_only")
STAGES = ("data", "rollout", "reference", "actor_update", "step")
#: EasyVideoR1 §4.3 (Qwen3-VL-8B, 32 H200): realtime / preprocessed time per stage.
SEED_RATIOS = {"step": 194.5 / 131.9, "rollout": 82.1 / 53.9, "reference": 53.6 / 18.8, "actor_update": 1.0}
PROMPT = "{{ problem }}\n{{ options | join('\\n') }}\n"
OPTIONS = ["A. red", "B. green", "C. blue", "D. white"]


# --- the per-stage media of EasyR1 ----------------------------------------------------------------


@dataclass
class StageMedia:
    """Encodes a sample again at each stage that needs its pixels, as EasyR1's workers do.

    ``encoder`` is the run's ``PromptEncoder`` (its cache decodes or loads according to the source
    mode). ``loads[stage]`` counts the encodings (each one loads the sample's frames) and
    ``seconds[stage]`` their time; :meth:`new_step` forgets the actor side's per-step memo.
    """

    encoder: PromptEncoder
    samples: dict[str, Sample] = field(default_factory=dict)
    loads: Counter[str] = field(default_factory=Counter)
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    prompt_tokens: list[int] = field(default_factory=list)
    _memo: dict[str, EncodedPrompt] = field(default_factory=dict)

    def __call__(self, sample: Sample) -> Prompt:
        """The loop's encoder (``Training.encode``): the data stage."""
        return self.encode(sample)

    def close(self) -> None:
        """Closed with the run, as the encoder it wraps (its prefetch thread)."""
        self.encoder.close()

    def encode(self, sample: Sample) -> Prompt:
        """The data stage: the prompt the loop carries (what EasyR1's dataset tokenises)."""
        self.samples[sample.id] = sample
        prompt = self._encode("data", sample)
        self.prompt_tokens.append(len(prompt.require_encoded()))
        return prompt

    def reencode(self, stage: str, encoded: EncodedPrompt, *, memo: bool = False) -> EncodedPrompt:
        """``encoded``'s sample encoded again for ``stage``; its prompt ids must be the same."""
        if memo and encoded.sample_id in self._memo:
            return self._memo[encoded.sample_id]
        fresh = self._encode(stage, self.samples[encoded.sample_id]).require_encoded()
        if fresh.prompt_ids != encoded.prompt_ids:
            raise AssertionError(
                f"{stage}: sample {encoded.sample_id!r} encodes to other prompt ids than at the data stage"
            )
        if memo:
            self._memo[encoded.sample_id] = fresh
        return fresh

    def new_step(self) -> None:
        self._memo.clear()

    def _encode(self, stage: str, sample: Sample) -> Prompt:
        start = time.perf_counter()
        prompt = self.encoder(sample)
        self.seconds[stage] += time.perf_counter() - start
        self.loads[stage] += 1
        return prompt


class StagedEngine:
    """The rollout engine, fed prompts re-encoded at the rollout stage (EasyR1's rollout worker)."""

    def __init__(self, inner: RolloutEngine, media: StageMedia) -> None:
        self.inner, self.media = inner, media

    def generate(self, prompts: Sequence[EncodedPrompt], params: SamplingParams) -> list[list[Completion]]:
        return self.inner.generate([self.media.reencode("rollout", p) for p in prompts], params)

    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        self.inner.update_weights(state_dict)

    def close(self) -> None:
        self.inner.close()


class RecordingBackend:
    """The actor's backend, remembering the prompts and responses of the last batch it collated.

    It runs the vision tower per row (no ``vision_once`` hook): the staged reference re-encodes every
    row's prompt as EasyR1 does, and both modes then compute the same thing, as the ratio needs."""

    vision_once = None

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.last: tuple[list[EncodedPrompt], Sequence[Sequence[int]] | None] = ([], None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def collate(
        self, encoded: Sequence[EncodedPrompt], responses: Sequence[Sequence[int]] | None = None
    ) -> ModelInputs:
        self.last = (list(encoded), responses)
        return self.inner.collate(encoded, responses)


class StagedReference(torch.nn.Module):
    """The reference model, run on its micro-batch's prompts re-encoded on the actor side (memoised
    per prompt and step, as EasyR1's actor worker does), instead of the tensors the loop carries."""

    def __init__(
        self, inner: torch.nn.Module, backend: RecordingBackend, media: StageMedia, *, padding_free: bool
    ) -> None:
        super().__init__()
        self.inner, self.backend, self.media = inner, backend, media
        self.padding_free = padding_free

    def forward(self, **kwargs: Any) -> Any:
        from videorl.packing import pack_for_backend

        encoded, responses = self.backend.last
        fresh = [self.media.reencode("reference", e, memo=True) for e in encoded]
        param = next(self.inner.parameters())
        inputs = self.backend.inner.collate(fresh, responses).to(device=param.device, dtype=param.dtype)
        # laid out as the update lays out its own batch (packed in one row with actor.padding_free)
        packed = pack_for_backend(self.backend.inner, inputs) if self.padding_free else None
        tensors = packed.model_kwargs() if packed is not None else inputs.model_kwargs()
        if not torch.equal(tensors["input_ids"], kwargs["input_ids"]):
            raise AssertionError("reference: the re-encoded batch has other input ids than the actor's")
        return self.inner(**{**kwargs, **tensors})  # the update's own options (logits_to_keep, use_cache)


def run_mode(config: TrainConfig, plugins: Plugins) -> list[dict[str, float]]:
    """Train ``config`` with EasyR1's per-stage media; per step: the loop's metrics, ``loads/<stage>``
    ``media_seconds/<stage>`` (time spent encoding, frames included) and ``prompt_tokens/mean``."""
    from videorl.train.compose import build_training

    training = build_training(config, plugins)
    if training.actor.reference is None:
        training.close()
        raise ValueError("the benchmark needs algorithm.use_kl_loss=true (a reference forward)")
    media = StageMedia(training.encode)
    backend = RecordingBackend(training.actor.backend)
    actor = replace(
        training.actor,
        backend=backend,
        reference=StagedReference(
            training.actor.reference, backend, media, padding_free=config.actor.padding_free
        ),
    )
    staged = replace(training, actor=actor, engine=StagedEngine(training.engine, media), encode=media)
    steps: list[dict[str, float]] = []

    def on_step(step: int, metrics: dict[str, float]) -> None:
        row = dict(metrics)
        row.update({f"loads/{k}": float(v) for k, v in media.loads.items()})
        row.update({f"media_seconds/{k}": v for k, v in media.seconds.items()})
        row["prompt_tokens/mean"] = statistics.fmean(media.prompt_tokens)
        steps.append(row)
        media.loads.clear()
        media.seconds.clear()
        media.prompt_tokens.clear()
        media.new_step()

    staged.run(on_step=on_step)  # the training path of `videorl train`, with the stages wrapped
    return steps


# --- the synthetic task ---------------------------------------------------------------------------


def write_clips(out: Path, count: int, *, height: int, width: int, seconds: float, fps: float) -> list[Path]:
    """``count`` distinct textured H.264 clips (kept when already there)."""
    from videorl.media.synthetic import textured_frames, write_video

    out.mkdir(parents=True, exist_ok=True)
    clips = []
    for i in range(count):
        path = out / f"clip_{i:03d}_{width}x{height}_{seconds:g}s_{fps:g}fps.mp4"
        if not path.exists():
            partial = path.with_name(f".{path.name}.tmp.mp4")
            write_video(
                partial, textured_frames(round(seconds * fps), height, width, seed=i), fps=fps, crf=23
            )
            partial.rename(path)
        clips.append(path)
    return clips


def write_dataset(path: Path, clips: Sequence[Path]) -> Path:
    """A multiple-choice dataset in the EasyVideoR1 schema, one row per clip, with offline answers
    (mix-policy gives the groups non-zero advantages, so the weights change every step)."""
    rows = [
        {
            "id": f"clip-{i:03d}",
            "data_type": "video",
            "problem_type": "multiple choice",
            "problem": "What colour is the square?",
            "options": OPTIONS,
            "answer": "A",
            "videos": [str(clip)],
            "offline_output": "<answer>A</answer>",
        }
        for i, clip in enumerate(clips)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def cache_dir(work: Path, frames: int, max_pixels: int) -> Path:
    """The frame cache of one video budget (a cache refuses entries of other parameters)."""
    return work / f"cache-{frames}f-{max_pixels}px"


def overrides(
    work: Path,
    model: Path,
    dataset: Path,
    mode: str,
    *,
    run: str,
    prompts: int,
    n: int,
    steps: int,
    frames: int,
    max_pixels: int,
    response: int,
    seed: int,
) -> list[str]:
    """The ``videorl train`` overrides of one run (only ``data.source_mode`` differs between modes)."""
    return [
        f"seed={seed}",
        f"output_dir={work / 'runs' / run}",
        f"model.path={model}",
        "model.dtype=float32",
        f"data.train_files=[{dataset}]",
        f"data.cache_dir={cache_dir(work, frames, max_pixels)}",
        f"data.source_mode={mode}",
        "data.video_fps=2.0",
        f"data.video_max_frames={frames}",
        f"data.video_min_pixels={max_pixels}",
        f"data.video_max_pixels={max_pixels}",
        "data.max_prompt_length=20000",
        f"data.rollout_batch_size={prompts}",
        "data.thinking=false",
        f"data.prompt_template={work / 'prompt.jinja'}",
        "rollout.engine=hf",
        f"rollout.n={n}",
        f"rollout.max_response_length={response}",
        "rollout.enable_mix_policy=true",
        "algorithm.use_kl_loss=true",
        f"actor.global_batch_size={prompts}",
        "actor.gradient_checkpointing=false",
        "optim.lr=1e-3",
        "optim.weight_decay=0.0",
        f"trainer.max_steps={steps}",
        f"trainer.save_every={steps}",
        "trainer.keep_last=1",
        "trainer.loggers=[jsonl]",
        "trainer.progress_bar=false",
    ]


def prepare(work: Path, plugins: Plugins, args: argparse.Namespace) -> tuple[Path, Path]:
    """The tiny model, the clips, the dataset and the frame cache (for ``preprocessed_only``)."""
    from videorl.media import DecodeParams, build_cache

    backend_cls = plugins.model_backends.get(args.family)
    model = work / f"model-{args.family}"
    if not (model / "config.json").is_file():
        backend_cls.build_tiny(model, seed=args.seed, width=64)
    (work / "prompt.jinja").write_text(PROMPT, encoding="utf-8")
    height, width = (int(x) for x in args.size.split("x")[::-1])
    clips = write_clips(
        work / "clips", args.prompts, height=height, width=width, seconds=args.seconds, fps=args.source_fps
    )
    dataset = write_dataset(work / "train.jsonl", clips)
    params = DecodeParams(
        factor=backend_cls.factor,
        temporal_patch_size=backend_cls.temporal_patch_size,
        fps=2.0,
        max_frames=args.frames,
        min_pixels=args.max_pixels,
        max_pixels=args.max_pixels,
    )
    report = build_cache(
        clips, params, cache_dir(work, args.frames, args.max_pixels), workers=1, progress=False
    )
    if report.failures:
        raise RuntimeError(f"caching the clips failed: {report.failures}")
    return model, dataset


# --- the report -----------------------------------------------------------------------------------


def stage_seconds(row: Mapping[str, float]) -> dict[str, float]:
    """Seconds per stage of one step, from the loop's ``time/*`` metrics."""
    reference = row.get("time/reference", 0.0)
    return {
        "data": row["time/data"],
        "rollout": row["time/rollout"],
        "reference": reference,
        "actor_update": row["time/actor"] - reference,
        "step": row["time/step"],
    }


def media_seconds(row: Mapping[str, float]) -> dict[str, float]:
    """Seconds per stage of one step spent getting frames and encoding prompts (the step: all of them)."""
    out = {s: row.get(f"media_seconds/{s}", 0.0) for s in ("data", "rollout", "reference")}
    return {**out, "actor_update": 0.0, "step": sum(out.values())}


def summarise(runs: Mapping[str, Sequence[Sequence[Mapping[str, float]]]]) -> dict[str, Any]:
    """Median seconds per stage over the steps of each mode, tokens per step, and the ratios.

    ``runs[mode]`` holds the per-step rows of each round; tokens must match step for step.
    ``ratio`` divides the measured medians. ``ratio_same_compute`` is the cross-check that a busy
    machine cannot blur: both modes run the same computation (same tokens), so each stage's time
    less its media time is pooled over both modes (median), and only the media time differs."""
    out: dict[str, Any] = {}
    tokens: dict[str, list[float]] = {}
    compute: dict[str, list[float]] = defaultdict(list)
    for mode, rounds in runs.items():
        rows = [row for steps in rounds for row in steps]
        seconds = [stage_seconds(r) for r in rows]
        media = [media_seconds(r) for r in rows]
        summary: dict[str, Any] = {s: statistics.median(x[s] for x in seconds) for s in STAGES}
        summary["media_seconds"] = {s: statistics.median(m[s] for m in media) for s in STAGES}
        summary["tokens_per_step"] = statistics.fmean(r["tokens/step"] for r in rows)
        summary["tokens_per_s"] = summary["tokens_per_step"] / summary["step"]
        summary["loads_per_step"] = {
            k.split("/", 1)[1]: v for k, v in sorted(rows[0].items()) if k.startswith("loads/")
        }
        for x, m in zip(seconds, media):
            for s in STAGES:
                compute[s].append(x[s] - m[s])
        out[mode] = summary
        tokens[mode] = [row["tokens/step"] for row in rows]
    first, second = MODES
    if tokens[first] != tokens[second]:
        raise AssertionError(f"tokens per step differ between the modes: {tokens[first]} vs {tokens[second]}")
    out["tokens_identical"] = True
    out["ratio"] = {s: out[first][s] / out[second][s] for s in STAGES}
    pooled = {s: statistics.median(compute[s]) for s in STAGES}
    out["compute_seconds"] = pooled
    out["ratio_same_compute"] = {
        s: (pooled[s] + out[first]["media_seconds"][s]) / (pooled[s] + out[second]["media_seconds"][s])
        for s in STAGES
    }
    out["seed_ratio"] = SEED_RATIOS
    return out


def main() -> None:
    from videorl.config import load_config
    from videorl.plugins import load_plugins

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="qwen3_vl", help="tiny model family (the seed trains Qwen3-VL)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step (one distinct clip each)")
    parser.add_argument("--n", type=int, default=4, help="responses per prompt")
    parser.add_argument("--response", type=int, default=16, help="most tokens per response")
    parser.add_argument("--steps", type=int, default=1, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=1, help="steps of the untimed warm-up run (0: none)")
    parser.add_argument("--rounds", type=int, default=4, help="fresh runs per mode, alternated")
    parser.add_argument("--size", default="448x448", help="source clip WIDTHxHEIGHT")
    parser.add_argument("--seconds", type=float, default=32.0, help="source clip length")
    parser.add_argument("--source-fps", type=float, default=30.0)
    parser.add_argument("--frames", type=int, default=64, help="data.video_max_frames (sampled at 2 fps)")
    parser.add_argument("--max-pixels", type=int, default=16384, help="pixels per frame (the seed: 262144)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=None, help="keep the model, clips and cache here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    plugins = load_plugins()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="videorl-train-step-"))
    work.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        model, dataset = prepare(work, plugins, args)
        shutil.rmtree(work / "runs", ignore_errors=True)
        runs: dict[str, list[list[dict[str, float]]]] = {mode: [] for mode in MODES}
        plan = [("warmup", MODES[1], args.warmup)] * (args.warmup > 0)
        plan += [(f"{mode}-{r}", mode, args.steps) for r in range(args.rounds) for mode in MODES]
        for run, mode, steps in plan:
            config: TrainConfig = load_config(
                None,
                overrides(
                    work,
                    model,
                    dataset,
                    mode,
                    run=run,
                    prompts=args.prompts,
                    n=args.n,
                    steps=steps,
                    frames=args.frames,
                    max_pixels=args.max_pixels,
                    response=args.response,
                    seed=args.seed,
                ),
            )
            rows = run_mode(config, plugins)
            if run != "warmup":
                runs[mode].append(rows)
        result = summarise(runs)
        probe = runs[MODES[1]][0][0]
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    width, height = args.size.split("x")
    result["setup"] = {
        "model": f"tiny {args.family} (text width 64, random)",
        "device": "cpu",
        "torch_threads": args.threads,
        "clips": f"{args.prompts} × {width}×{height} H.264, {args.seconds:g} s at {args.source_fps:g} fps",
        "frames": args.frames,
        "max_pixels_per_frame": args.max_pixels,
        "prompts_per_step": args.prompts,
        "n": args.n,
        "max_response_tokens": args.response,
        "timed_steps_per_mode": args.rounds * args.steps,
        "mean_prompt_tokens": probe["prompt_tokens/mean"],
        "wall_s": time.perf_counter() - start,
    }
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
