"""Step time with ``data.prefetch`` off and on: the next step's videos decoded and encoded in a background
thread while this step's update runs, side by side in one run.

Each step takes ``--prompts`` samples from :class:`~videorl.train.data.TrainData`, prepares them with the
training :class:`~videorl.encoding.PromptEncoder` (a tiny Qwen2.5-VL backend; H.264 clips of
``--seconds`` s at 640×480, 30 fps, decoded on the fly: no frame cache, the slow path, after a wait
of ``--io-delay`` s per video standing for a read from network storage) and then "updates": a sleep
of ``--update`` seconds standing for the rollout and update on an accelerator, during which the host
is idle. Prints one JSON line: the median step time and data wait (the time until the step's prompts
are ready) off and on over the steps after the first (which has nothing prefetched), and whether both
runs produced the same prompts (ids and pixels).

Usage: ``python benchmarks/prefetch.py [--steps 5] [--prompts 2] [--seconds 6] [--io-delay 0.5]
[--update 1.5]`` (about a minute on 2 shared cores).

Measured 2026-12-01 (defaults, 2 cores under a load average of 21): step 3.54 s off, 1.77 s on (2.0x);
data wait 2.04 s off, 0.27 s on; same prompts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def make_clips(folder: Path, count: int, seconds: float) -> list[Path]:
    from videorl.media.synthetic import textured_frames, write_video

    frames = list(textured_frames(int(30 * seconds), 480, 640, seed=0))
    clips = []
    for i in range(count):
        shifted = (np.roll(f, 7 * i, axis=1) for f in frames)  # distinct clips, same decode cost
        clips.append(write_video(folder / f"clip{i}.mp4", shifted, fps=30.0))
    return clips


def make_encoder(model: Path, io_delay: float) -> Any:
    from videorl.backend import backend_for_model
    from videorl.encoding import PromptEncoder
    from videorl.media import MediaCache
    from videorl.media.loader import MediaLoader
    from videorl.plugins import load_plugins

    plugins = load_plugins()
    backend = backend_for_model(model, plugins.model_backends)
    loader = MediaLoader.for_budget(MediaCache(None, "realtime_only"), backend.budget, backend)
    decode = loader.video

    def slow_video(path: str) -> Any:
        time.sleep(io_delay)
        return decode(path)

    loader.video = slow_video  # type: ignore[method-assign]
    return PromptEncoder(backend, loader, plugins.prompt_templates, thinking=False)


def run(
    samples: list[Any], warm_up: Any, model: Path, args: argparse.Namespace, prefetch: bool
) -> tuple[list[float], list[float], list[Any]]:
    from videorl.train.data import TrainData

    encoder = make_encoder(model, args.io_delay)
    encoder(warm_up)  # the processor's first call is slow: a sample no step takes
    data = TrainData(samples, seed=0, prefetcher=encoder if prefetch else None)
    step_times, data_times, out = [], [], []
    for _ in range(args.steps):
        start = time.perf_counter()
        batch = [encoder(s) for s in data.take(args.prompts)]
        data_times.append(time.perf_counter() - start)
        time.sleep(args.update)  # the rollout and update on the accelerator: the host is free
        step_times.append(time.perf_counter() - start)
        out += batch
    return step_times, data_times, out


def same_prompts(a: list[Any], b: list[Any]) -> bool:
    import torch

    return all(
        x.encoded.prompt_ids == y.encoded.prompt_ids
        and x.encoded.visual.keys() == y.encoded.visual.keys()
        and all(torch.equal(x.encoded.visual[k], y.encoded.visual[k]) for k in x.encoded.visual)
        for x, y in zip(a, b)
    ) and len(a) == len(b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--io-delay", type=float, default=0.5)
    parser.add_argument("--update", type=float, default=1.5)
    args = parser.parse_args()

    from videorl.data import Sample
    from videorl_models.tiny import build_tiny

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = build_tiny("qwen2_5_vl", folder / "tiny", seed=0)
        clips = make_clips(folder, args.prompts * (args.steps + 1) + 1, args.seconds)
        samples = [
            Sample(f"clip{i}", "video", "What happens?", "free-form", "x", videos=[str(c)])
            for i, c in enumerate(clips)
        ]
        off = run(samples[:-1], samples[-1], model, args, prefetch=False)
        on = run(samples[:-1], samples[-1], model, args, prefetch=True)
    # the first step has nothing prefetched: the medians are of the later steps
    step_off, step_on = statistics.median(off[0][1:]), statistics.median(on[0][1:])
    data_off, data_on = statistics.median(off[1][1:]), statistics.median(on[1][1:])
    print(
        json.dumps(
            {
                "prompts_per_step": args.prompts,
                "io_delay_s": args.io_delay,
                "update_s": args.update,
                "step_s": {"off": round(step_off, 3), "on": round(step_on, 3)},
                "step_ratio_off_over_on": round(step_off / step_on, 2),
                "data_wait_s": {"off": round(data_off, 3), "on": round(data_on, 3)},
                "same_prompts": same_prompts(off[2], on[2]),
            }
        )
    )


if __name__ == "__main__":
    main()
