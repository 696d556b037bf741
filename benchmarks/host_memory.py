"""Host memory of the training data path per rank: pixels held as float32 on the host (before) against
uint8 patches normalised on the device (after), side by side in one run.

Each mode runs in its own spawned process (peak RSS is per process and never goes down): a tiny
Qwen2.5-VL backend, the training :class:`~videorl.encoding.PromptEncoder` with ``data.prefetch`` on
(:class:`~videorl.train.data.TrainData` hands it each batch and the next), videos of ``--frames``
uint8 frames at ``--size``² pixels served from memory (no decode: the frames are the media cache's
output). Each step takes ``--prompts`` prompts and holds them while the next batch is prepared in
the background (the rollout and update, on the accelerator, are a short sleep here: the host holds
what it holds). "before" normalises the pixels on the host as the processor does (what the encoder
held before: float32 pixels); "after" is the encoder as it is. Prints one JSON line: per mode the
peak RSS above the process's RSS after set-up, the largest bytes held by prompts alive at once
(frames + visual tensors) and of their pixel tensors alone, and the before/after ratios.

Usage: ``python benchmarks/host_memory.py [--steps 3] [--prompts 4] [--frames 16] [--size 448]``
(about two minutes on 2 shared cores).

Measured 2026-12-02 (defaults, 2 shared cores; the step's batch and the next, 8 prompts of 16 frames
at 448²): held 385.4 MB before, 154.1 MB after (2.5×: the uint8 frames, 77 MB, are held either
way); pixels alone 4.0× smaller; peak RSS above set-up 539.6 MB before, 240.8 MB after (2.24×).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import tempfile
import time
from pathlib import Path
from typing import Any


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _held_bytes(prompts: list[Any]) -> tuple[int, int]:
    """Bytes the prompts hold (each tensor's storage once): frames and visual tensors, and the pixel
    tensors alone."""
    seen: dict[int, int] = {}
    pixels: dict[int, int] = {}
    for p in prompts:
        enc = p.require_encoded()
        frames = [f for f, _ in enc.prompt.videos] + list(enc.prompt.images)
        for t in [*frames, *enc.visual.values()]:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        for key in ("pixel_values", "pixel_values_videos"):
            if key in enc.visual:
                pixels[enc.visual[key].untyped_storage().data_ptr()] = enc.visual[key].nbytes
    return sum(seen.values()), sum(pixels.values())


def _host_normalised(encode: Any) -> Any:
    """``encode`` as it was: the pixels normalised to float32 on the host, where they are then held."""
    import dataclasses

    def before(prompt: Any) -> Any:
        enc = encode(prompt)
        visual = dict(enc.visual)
        for key, norm in enc.pixel_norm.items():
            visual[key] = norm.apply(visual[key])
        return dataclasses.replace(enc, visual=visual, pixel_norm={})

    return before


def _measure(mode: str, model: str, args: argparse.Namespace, out: Any) -> None:
    import torch

    from videorl.backend import backend_for_model
    from videorl.data import Sample
    from videorl.encoding import PromptEncoder
    from videorl.media.metadata import VideoMetadata
    from videorl.plugins import load_plugins
    from videorl.train.data import TrainData

    torch.set_num_threads(1)
    plugins = load_plugins()
    backend = backend_for_model(Path(model), plugins.model_backends)
    if mode == "before":
        backend.encode = _host_normalised(backend.encode)
    n, size = args.frames, args.size
    meta = VideoMetadata(
        source_fps=2.0, total_frames=n, duration=n / 2.0, frame_indices=tuple(range(n)),
        timestamps=tuple(i / 2.0 for i in range(n)), source_width=size, source_height=size,
        width=size, height=size,
    )  # fmt: skip

    class Media:  # the frame cache's output, made fresh per request as a decode would
        def video(self, path: str) -> Any:
            gen = torch.Generator().manual_seed(int(path))
            return torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=gen), meta

        def image(self, path: str) -> Any:
            raise AssertionError("no images here")

    encoder = PromptEncoder(backend, Media(), plugins.prompt_templates)  # type: ignore[arg-type]
    samples = [
        Sample(f"s{i}", "video", "What happens?", "open_ended", "x", videos=[str(i)], origin=f"mem:{i}")
        for i in range((args.steps + 2) * args.prompts)
    ]
    encoder(Sample("warm", "video", "Warm up.", "open_ended", "x", videos=["999"], origin="mem:warm"))
    data = TrainData(samples, seed=0, shuffle=False, prefetcher=encoder)
    base, held, pixels = _rss_bytes(), 0, 0
    for _ in range(args.steps):
        batch = [encoder(s) for s in data.take(args.prompts)]
        time.sleep(0.5)  # the step runs on the accelerator; the next batch is prepared meanwhile
        ahead = [f.result() for s, f in encoder._ahead._queued]  # the next batch, once prepared
        both, only_pixels = _held_bytes(batch + ahead)
        held, pixels = max(held, both), max(pixels, only_pixels)
        del batch, ahead
    encoder.close()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    out.put((mode, {"peak_rss_above_setup": peak, "held_bytes": held, "held_pixel_bytes": pixels}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--size", type=int, default=448)
    args = parser.parse_args()
    from videorl_models.tiny import build_tiny

    with tempfile.TemporaryDirectory() as tmp:
        model = str(build_tiny("qwen2_5_vl", Path(tmp) / "model", seed=0))
        ctx = multiprocessing.get_context("spawn")
        results: dict[str, dict[str, int]] = {}
        queue = ctx.Queue()
        for mode in ("before", "after"):  # one at a time: the two never share the cores
            proc = ctx.Process(target=_measure, args=(mode, model, args, queue))
            proc.start()
            name, figures = queue.get()
            proc.join()
            results[name] = figures
    before, after = results["before"], results["after"]
    print(
        json.dumps(
            {
                "config": vars(args),
                "before": before,
                "after": after,
                "held_ratio": round(before["held_bytes"] / after["held_bytes"], 2),
                "held_pixel_ratio": round(before["held_pixel_bytes"] / after["held_pixel_bytes"], 2),
                "peak_rss_ratio": round(
                    before["peak_rss_above_setup"] / max(after["peak_rss_above_setup"], 1), 2
                ),
            }
        )
    )


if __name__ == "__main__":
    main()
