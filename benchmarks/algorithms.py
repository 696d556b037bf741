"""Every algorithm preset on the demo task: the same seed, data and steps, one preset at a time.

Prints one JSON line: per preset, held-out accuracy before and after (greedy, exact letter, as
``videorl demo``), wall time of the run, the mean sampled response length over the steps and the
last step's reward. The demo (``videorl demo``: a tiny random Qwen2.5-VL learning the colour of a
square in 56×56 clips) reaches 0.98 held-out accuracy with GRPO in its default 150 steps; the issue's
target is >= 0.8 for every preset.

Usage: ``python benchmarks/algorithms.py [--steps N] [--presets grpo,dapo,...] [--workdir DIR] [--out FILE]``
(``--train-clips``/``--val-clips`` shrink the task for a smoke run). Each preset's row is also printed
to stderr as it finishes, so a long run shows its partial table; ``--out`` writes the final line to a file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def main() -> None:
    from videorl import demo
    from videorl.atomic import atomic_write_text
    from videorl.plugins import load_plugins

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=150, help="training steps per preset (the demo's: 150)")
    parser.add_argument(
        "--presets", default="", help="comma-separated presets (default: every registered one)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-clips", type=int, default=96)
    parser.add_argument("--val-clips", type=int, default=64)
    parser.add_argument("--workdir", type=Path, default=None, help="keep the runs here (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON line to this file")
    args = parser.parse_args()

    plugins = load_plugins()
    presets = [p for p in args.presets.split(",") if p] or plugins.registries["algorithm_presets"].names()
    with tempfile.TemporaryDirectory(prefix="videorl-algorithms-") as tmp:
        work = args.workdir or Path(tmp)
        results: dict[str, dict[str, Any]] = {}
        for preset in presets:
            run_dir = work / "runs" / preset
            start = time.perf_counter()
            result = demo.run(
                work, plugins, steps=args.steps, seed=args.seed, train_clips=args.train_clips,
                val_clips=args.val_clips, extra=[f"algorithm.preset={preset}", f"output_dir={run_dir}"],
            )  # fmt: skip
            seconds = time.perf_counter() - start
            rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").open()]
            lengths = [r["response_length/mean"] for r in rows if "response_length/mean" in r]
            results[preset] = {
                "accuracy_before": round(result.before, 4),
                "accuracy_after": round(result.after, 4),
                "wall_s": round(seconds, 1),
                "mean_response_length": round(statistics.fmean(lengths), 3) if lengths else None,
                "last_reward": rows[-1].get("reward/overall") if rows else None,
            }
            print(json.dumps({"preset": preset, **results[preset]}), file=sys.stderr, flush=True)
    line = json.dumps({"benchmark": "algorithms", "steps": args.steps, "seed": args.seed, "presets": results})
    print(line)
    if args.out:
        atomic_write_text(args.out, line + "\n")


if __name__ == "__main__":
    main()
