"""Speed and size of the cached video data path, measured side by side in one run.

Prints one JSON line. Clips are synthetic H.264 written with PyAV: a 60 s 1280×720 30 fps clip and a
10 s 320×240 clip; settings fps 2, max_frames 128, video max_pixels 262144, factor 28 (Qwen2.5-VL).

- ``cached_vs_decode_*``: on-the-fly decode + sample + resize time / cached load time (target >= 20
  for 720p). A cached load maps the entry and checks its CRC-32, so every byte has been read and the
  uint8 tensor plus metadata are ready to use;
- ``cached_vs_evr1_load`` / ``bytes_vs_evr1``: against the EasyVideoR1-style cache (float32 frames in
  a dict saved with ``torch.save``, read with ``torch.load(weights_only=False)``): speed (target >= 3)
  and bytes (target <= 0.25);
- ``cached_vs_read_floor``: cached load time / a plain ``read()`` of the same file from the page
  cache (target <= 2);
- ``build_2v1_workers``: ``build_cache`` on 8 distinct 10 s 720p clips, time with 1 worker / with 2
  workers (fresh caches, alternated, best of 2), one decoder thread per worker (target >= 1.6);
  ``build_2v1_default_threads`` the same with the command's default threads (CPU cores shared among workers).

Usage: ``python benchmarks/data_path.py [--repeats N] [--build-clips N] [--hd-seconds S] [--workdir DIR]``
(``--hd-seconds`` shortens the 720p clip for a smoke run; the targets are for its default, 60 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from videorl.media import DecodeParams, MediaCache, build_cache, decode_video
from videorl.media.synthetic import textured_frames, write_video

PARAMS = DecodeParams(factor=28, temporal_patch_size=2, fps=2.0, max_frames=128, max_pixels=262144)


def timed(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall time of ``repeats`` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def read_file(path: Path) -> None:
    with open(path, "rb") as f:
        f.read()


def evr1_style_entry(path: Path, frames: Any, meta: Any) -> None:
    """What EasyVideoR1's preprocess_videos.py writes: float frames and a metadata dict, pickled."""
    import torch

    torch.save(
        {
            "frames": torch.from_numpy(frames).float(),
            "metadata": {
                "fps": meta.source_fps,
                "frames_indices": list(meta.frame_indices),
                "total_num_frames": meta.total_frames,
                "duration": meta.duration,
                "width": meta.width,
                "height": meta.height,
            },
            "sample_fps": meta.sampled_fps,
            "preprocess_version": "qwen3vl_patch16_v1",
        },
        path,
    )


def measure_clip(clip: Path, cache: MediaCache, work: Path, repeats: int) -> dict[str, float]:
    ref = cache.get_or_build(clip, PARAMS)
    entry = cache.entry_path(ref.key or "")
    decode_s = timed(lambda: decode_video(clip, PARAMS), max(1, repeats // 3))
    load_s = timed(lambda: cache.load(ref, PARAMS), repeats)
    read_s = timed(lambda: read_file(entry), repeats)
    frames, meta = decode_video(clip, PARAMS)
    evr1 = work / f"{clip.stem}.pt"
    evr1_style_entry(evr1, frames, meta)

    def evr1_load() -> None:
        import torch

        torch.load(evr1, weights_only=False)

    evr1_s = timed(evr1_load, repeats)
    return {
        "frames": meta.num_frames,
        "height": meta.height,
        "width": meta.width,
        "decode_s": decode_s,
        "cached_load_s": load_s,
        "read_s": read_s,
        "evr1_load_s": evr1_s,
        "entry_bytes": entry.stat().st_size,
        "evr1_bytes": evr1.stat().st_size,
    }


def measure_build(clips: list[Path], work: Path, threads: int | None, rounds: int) -> dict[str, float]:
    """Fresh builds with 1 and 2 workers, alternated ``rounds`` times; the best time of each."""
    seconds: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(rounds):
        for workers in (1, 2):
            root = work / f"build-{workers}-{threads}"
            start = time.perf_counter()
            report = build_cache(clips, PARAMS, root, workers=workers, threads=threads, progress=False)
            seconds[workers].append(time.perf_counter() - start)
            assert report.ok and report.built == len(clips), report
            shutil.rmtree(root)
    one, two = min(seconds[1]), min(seconds[2])
    return {"workers1_s": one, "workers2_s": two, "speedup": one / two}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed repetitions per measurement (median)")
    parser.add_argument("--build-clips", type=int, default=8)
    parser.add_argument("--build-seconds", type=float, default=10.0, help="length of each build clip (720p)")
    parser.add_argument("--build-rounds", type=int, default=2, help="alternated 1-/2-worker builds (best of)")
    parser.add_argument("--hd-seconds", type=float, default=60.0, help="length of the measured 720p clip")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the clips and caches here")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="videorl-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        clips = {
            "720p": work / f"clip_720p_{args.hd_seconds:g}s.mp4",
            "240p": work / "clip_240p_10s.mp4",
        }
        if not clips["720p"].exists():
            write_video(
                clips["720p"], textured_frames(round(30 * args.hd_seconds), 720, 1280, seed=1), fps=30, crf=23
            )
        if not clips["240p"].exists():
            write_video(clips["240p"], textured_frames(300, 240, 320, seed=2), fps=30, crf=23)
        build_clips = []
        for i in range(args.build_clips):
            path = work / f"build_{i}.mp4"
            if not path.exists():
                write_video(
                    path,
                    textured_frames(round(30 * args.build_seconds), 720, 1280, seed=10 + i),
                    fps=30,
                    crf=23,
                )
            build_clips.append(path)

        cache = MediaCache(work / "cache")
        results = {name: measure_clip(clip, cache, work, args.repeats) for name, clip in clips.items()}
        build_one_thread = measure_build(build_clips, work, threads=1, rounds=args.build_rounds)
        build_default = measure_build(build_clips, work, threads=None, rounds=args.build_rounds)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)

    hd = results["720p"]
    out: dict[str, Any] = {
        "cached_vs_decode_720p": hd["decode_s"] / hd["cached_load_s"],
        "cached_vs_decode_240p": results["240p"]["decode_s"] / results["240p"]["cached_load_s"],
        "cached_vs_evr1_load": hd["evr1_load_s"] / hd["cached_load_s"],
        "bytes_vs_evr1": hd["entry_bytes"] / hd["evr1_bytes"],
        "cached_vs_read_floor": hd["cached_load_s"] / hd["read_s"],
        "build_2v1_workers": build_one_thread["speedup"],
        "build_2v1_default_threads": build_default["speedup"],
    }
    out["targets_met"] = {
        "cached_vs_decode_720p>=20": out["cached_vs_decode_720p"] >= 20,
        "cached_vs_evr1_load>=3": out["cached_vs_evr1_load"] >= 3,
        "bytes_vs_evr1<=0.25": out["bytes_vs_evr1"] <= 0.25,
        "cached_vs_read_floor<=2": out["cached_vs_read_floor"] <= 2,
        "build_2v1_workers>=1.6": out["build_2v1_workers"] >= 1.6,
    }
    out["detail"] = {
        "clips": results,
        "build_one_thread_per_worker": build_one_thread,
        "build_default_threads": build_default,
        "build_clips": f"{args.build_clips} x {args.build_seconds:g} s 1280x720",
        "params": PARAMS.to_dict(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    print(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    main()
