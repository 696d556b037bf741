"""A benchmark pass inside training against ``videorl eval run`` on the exported checkpoint, side by side.

Prints one JSON line. The task is the demo's (a tiny random Qwen2.5-VL built offline, its frame-order
data), trained at lr 1e-6 so that its answers stay random texts of up to 16 tokens, which must match
token for token; the benchmark is synthetic MVBench (official layout, ``object_existence`` rows) over
``--videos`` H.264 clips written with PyAV (textured frames, 320×240, 30 fps, 4 s); greedy, fp32, HF
engine, on CPU, at the demo's visual budget (2 fps, 4 frames of 56×56) on both sides, each with a cold
frame cache.

- ``in_loop_s``: ``time/benchmarks`` of the last step of ``videorl train ... trainer.benchmarks=[...]``
  (``--steps`` steps, one pass after the last): what the pass adds to the step, on the engine the run
  already holds;
- ``added_s``: the wall time of that training command minus the same command without benchmarks
  (best of ``--repeats`` each, alternated): what the pass adds to the whole run;
- ``separate_s``: the wall time of ``videorl eval run --model RUN/checkpoints/step_N`` (a new process:
  start, checkpoint export, model load, the evaluation), best of ``--repeats``, each into a fresh
  directory;
- ``ratio`` = separate_s / in_loop_s, ``ratio_added`` = separate_s / added_s;
- ``response_tokens``: the mean length of the pass's responses (what each side generated);
- ``same_scores``: the pass's per-row records (responses, extracted answers, scores) and
  ``scores.jsonl`` equal the separate evaluation's (asserted).

Usage: ``python benchmarks/in_loop_eval.py [--videos 32] [--steps 2] [--repeats 2] [--workdir DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FAMILY = "qwen2_5_vl"
MAX_TOKENS = 16
CANDIDATES = ["red", "green", "blue", "yellow"]


def write_benchmark(root: Path, videos: int) -> Path:
    from videorl.media.synthetic import textured_frames, write_video

    folder = root / "video" / "clevrer" / "video_validation"
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(videos):
        write_video(folder / f"clip-{i}.mp4", textured_frames(120, 240, 320, seed=i), fps=30.0)
        rows.append({"video": f"clip-{i}.mp4", "question": f"What colour is square {i}?",
                     "candidates": CANDIDATES, "answer": CANDIDATES[i % len(CANDIDATES)]})  # fmt: skip
    (root / "json").mkdir(parents=True, exist_ok=True)
    (root / "json" / "object_existence.json").write_text(json.dumps(rows), encoding="utf-8")
    return root


def _timed(args: list[str]) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "videorl.cli", *args], capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        raise SystemExit(f"videorl {' '.join(args[:2])} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def records(directory: Path) -> dict[str, Any]:
    """A pass directory's MVBench prediction records, by row id."""
    from videorl.eval import read_predictions

    return {i: p.record for i, p in read_predictions(directory / "mvbench" / "predictions.jsonl").items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--videos", type=int, default=32)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="videorl-in-loop-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        measure(args, work)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def measure(args: argparse.Namespace, work: Path) -> None:
    """Train, evaluate and print the JSON line (see the module docstring)."""
    from videorl import demo
    from videorl.plugins import load_plugins
    from videorl.runs.history import read_metrics
    from videorl.train.benchmarks import pass_dir

    task = work / "task"
    model, train, val = demo.prepare(task, load_plugins(), family=FAMILY, seed=0, train=8, val=4)
    (work / "empty.yaml").write_text("")
    bench = write_benchmark(work / "mvbench", args.videos)
    spec = f"trainer.benchmarks=[{{name: mvbench, data_root: {bench}, max_tokens: {MAX_TOKENS}}}]"
    budget = [f"--fps={demo.FPS}", f"--max-frames={demo.FRAMES}", f"--min-pixels={demo.SIDE**2}",
              f"--max-pixels={demo.SIDE**2}", f"--max-tokens={MAX_TOKENS}", "--quiet"]  # fmt: skip

    def train_args(run: Path, *extra: str) -> list[str]:
        overrides = demo.demo_overrides(task, model, train, val, steps=args.steps, seed=3, engine="hf")
        return ["train", str(work / "empty.yaml"), *overrides, f"output_dir={run}",
                "data.rollout_batch_size=2", "actor.global_batch_size=2", "rollout.n=4",
                "optim.lr=1e-6", "trainer.progress_bar=false", "trainer.val_every=0",
                f"trainer.save_every={args.steps}",
                f"data.cache_dir={run / 'cache'}", "data.source_mode=prefer_preprocessed",
                *extra]  # fmt: skip

    with_pass, without, separate, in_loop = [], [], [], []
    for r in range(args.repeats):
        run, plain, out = work / f"run-{r}", work / f"plain-{r}", work / f"eval-{r}"
        for path in (run, plain, out):
            shutil.rmtree(path, ignore_errors=True)
        without.append(_timed(train_args(plain)))
        with_pass.append(_timed(train_args(run, spec)))  # its own cold cache: the training clips too
        in_loop.append(read_metrics(run / "metrics.jsonl")[-1]["time/benchmarks"])
        checkpoint = run / "checkpoints" / f"step_{args.steps:06d}"
        separate.append(_timed(["eval", "run", "--model", str(checkpoint), "--benchmark",
                                f"mvbench={bench}", "--out", str(out), *budget]))  # fmt: skip
        passed = pass_dir(run, args.steps, "mvbench")
        same = (
            records(passed) == records(out)
            and (passed / "mvbench" / "scores.jsonl").read_text()
            == (out / "mvbench" / "scores.jsonl").read_text()
        )
        assert same, f"the in-loop pass ({passed}) and videorl eval run ({out}) disagree"
        lengths = [r["num_output_tokens"] for r in records(passed).values()]

    added = max(min(with_pass) - min(without), 1e-9)
    print(json.dumps({
        "videos": args.videos, "steps": args.steps, "max_tokens": MAX_TOKENS,
        "in_loop_s": round(min(in_loop), 3), "added_s": round(added, 3),
        "separate_s": round(min(separate), 3),
        "ratio": round(min(separate) / min(in_loop), 2), "ratio_added": round(min(separate) / added, 2),
        "train_s": round(min(without), 3), "train_with_pass_s": round(min(with_pass), 3),
        "response_tokens": round(sum(lengths) / len(lengths), 1), "same_scores": True,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
