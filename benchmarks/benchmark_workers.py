"""Benchmark passes on Ray between steps against passes on benchmark workers beside training, side by side.

Prints one JSON line. The same Ray run twice (the demo's task and tiny random Qwen2.5-VL, one
colocated actor worker, ``--steps`` steps, a pass of synthetic MVBench every ``--every`` steps and after
the last; the clips of ``benchmarks/in_loop_eval.py``, greedy, HF engine, CPU, each run with a cold
frame cache): once with the rollout worker answering the passes between steps
(``ray.benchmark_workers: 0``), once with one benchmark worker of its own (``ray.benchmark_workers:
1``). Per run:

- ``wall_s``: the training command's wall time (Ray start included);
- ``waited_s``: the sum of ``time/benchmarks`` over the rows, what the loop spent on benchmarks (between
  steps: the passes themselves; with benchmark workers: the waits its rules impose);
- ``waited_before_last_s``: the same without the last step's row (whose pass is waited for in both);
- ``waits``: ``time/benchmarks`` per step that has it;
- ``pass_s``: the passes' own wall time (``bench/mvbench/seconds``; benchmark workers only).

``same_scores``: every pass's records (responses, extracted answers, scores) are equal in the two runs
(asserted): the same weights answer the same rows. On a machine with few cores the benchmark worker
competes with the training worker for them, so ``wall_s`` gains less than ``waited_s`` loses; on GPUs
the group has devices of its own.

Usage: ``python benchmarks/benchmark_workers.py [--videos 64] [--steps 12] [--every 4] [--workdir DIR]``
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

from in_loop_eval import FAMILY, MAX_TOKENS, records, write_benchmark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--videos", type=int, default=64)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="videorl-benchmark-workers-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        measure(args, work)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def measure(args: argparse.Namespace, work: Path) -> None:
    """Train both ways and print the JSON line (see the module docstring)."""
    from videorl import demo
    from videorl.plugins import load_plugins
    from videorl.runs.history import read_metrics
    from videorl.train.benchmarks import pass_dir

    task = work / "task"
    model, train, val = demo.prepare(task, load_plugins(), family=FAMILY, seed=0, train=8, val=4)
    (work / "empty.yaml").write_text("")
    bench = write_benchmark(work / "mvbench", args.videos)
    spec = (
        f"trainer.benchmarks=[{{name: mvbench, data_root: {bench}, every: {args.every}, "
        f"max_tokens: {MAX_TOKENS}}}]"
    )
    out: dict[str, Any] = {"videos": args.videos, "steps": args.steps, "every": args.every}
    runs = {}
    for workers in (0, 1):
        run = work / f"workers-{workers}"
        shutil.rmtree(run, ignore_errors=True)
        overrides = demo.demo_overrides(task, model, train, val, steps=args.steps, seed=3, engine="hf")
        command = [sys.executable, "-m", "videorl.cli", "train", str(work / "empty.yaml"), *overrides,
                   f"output_dir={run}", "data.rollout_batch_size=2", "actor.global_batch_size=2",
                   "rollout.n=4", "optim.lr=1e-6", "trainer.progress_bar=false", "trainer.val_every=0",
                   f"trainer.save_every={args.steps}", f"data.cache_dir={run / 'cache'}",
                   "data.source_mode=prefer_preprocessed", spec, "--ray", "ray.actor_workers=1",
                   "ray.placement=colocated", "ray.auth=disabled",
                   f"ray.benchmark_workers={workers}"]  # fmt: skip
        start = time.perf_counter()
        done = subprocess.run(
            command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
        )
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"the run with ray.benchmark_workers={workers} failed:\n{done.stderr[-3000:]}")
        rows = read_metrics(run / "metrics.jsonl")
        waited = [r.get("time/benchmarks", 0.0) for r in rows]
        out[f"workers_{workers}"] = {
            "wall_s": round(wall, 2),
            "waited_s": round(sum(waited), 2),
            "waited_before_last_s": round(sum(waited[:-1]), 2),
            "waits": {r["step"]: round(r["time/benchmarks"], 2) for r in rows if "time/benchmarks" in r},
            **(
                {"pass_s": round(sum(r.get("bench/mvbench/seconds", 0.0) for r in rows), 2)}
                if workers
                else {}
            ),
        }
        runs[workers] = run
    passes = [s for s in range(1, args.steps + 1) if s % args.every == 0 or s == args.steps]
    for s in passes:
        a, b = (pass_dir(runs[w], s, "mvbench") for w in (0, 1))
        assert records(a) == records(b), f"the passes of step {s} disagree: {a} vs {b}"
    out["same_scores"] = True
    print(json.dumps(out))


if __name__ == "__main__":
    main()
