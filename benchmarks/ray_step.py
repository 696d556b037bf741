"""What the Ray controller costs: GRPO step time under torchrun and under ``videorl train --ray``.

Prints one JSON line. The same demo task (tiny random Qwen2.5-VL, cached synthetic clips, hf engine)
runs ``--steps`` steps with 2 FSDP ranks three ways, alternated ``--rounds`` times so that a busy
neighbour slows all alike:

- ``torchrun``: ``torch.distributed.run --nproc-per-node 2 -m videorl.cli train`` (each rank its own
  loop, engine and rewards);
- ``ray_colocated``: ``--ray ray.actor_workers=2`` (2 actor workers each with its engine, 1 reward
  worker, the controller);
- ``ray_split``: ``--ray ray.placement=split ray.actor_workers=2`` (2 actor, 2 rollout, 1 reward
  worker; weights through the object store after each update).

Per launcher: the median over steps 2.. (step 1 warms up) of ``time/step`` and of each stage, the
wall time of the whole command (start-up included), the bytes per sample that crossed between the
controller and the workers, and the ratios to torchrun. Every launcher must log the same
``actor/loss`` at every step (the Ray path's promise), which the script checks.

Usage: ``python benchmarks/ray_step.py [--steps 6] [--rounds 2] [--prompts 4] [--n 4]
[--launchers torchrun,ray_colocated,ray_split] [--workdir DIR]`` (defaults: about 4 minutes of wall
time on 2 cores; ``--launchers``: a subset, torchrun always among them, for a quick check).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

STAGES = ("step", "rollout", "reward", "actor", "weight_sync", "data")
LAUNCHERS = {
    "torchrun": [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "videorl.cli",
        "train",
    ],
    "ray_colocated": ["-m", "videorl.cli", "train"],
    "ray_split": ["-m", "videorl.cli", "train"],
}
RAY_ARGS = {
    "torchrun": [],
    "ray_colocated": ["--ray", "ray.actor_workers=2"],
    "ray_split": ["--ray", "ray.actor_workers=2", "ray.placement=split"],
}


def prepare(workdir: Path, prompts: int, n: int, steps: int) -> tuple[Path, list[str]]:
    from videorl import demo
    from videorl.plugins import load_plugins

    model, train, val = demo.prepare(
        workdir / "task", load_plugins(), family="qwen2_5_vl", seed=0, train=prompts * steps, val=2
    )
    config = workdir / "empty.yaml"
    config.write_text("seed: 5\n")
    overrides = [
        *demo.demo_overrides(workdir / "task", model, train, val, steps=steps, seed=5, engine="hf"),
        f"data.rollout_batch_size={prompts}",
        f"actor.global_batch_size={prompts}",
        f"rollout.n={n}",
        "trainer.save_every=0",
        "trainer.val_every=0",
        "trainer.progress_bar=false",
        "data.val_files=[]",
    ]
    return config, overrides


def run_once(name: str, config: Path, overrides: list[str], out: Path) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    command = [
        sys.executable,
        *LAUNCHERS[name],
        str(config),
        *overrides,
        f"output_dir={out}",
        *RAY_ARGS[name],
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return {"wall": wall, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step (2 per rank)")
    parser.add_argument("--n", type=int, default=4, help="responses per prompt")
    parser.add_argument(
        "--launchers", default=",".join(LAUNCHERS), help="comma-separated subset, torchrun among them"
    )
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    launchers = [name.strip() for name in args.launchers.split(",")]
    if "torchrun" not in launchers or not set(launchers) <= set(LAUNCHERS):
        parser.error(f"--launchers: a subset of {','.join(LAUNCHERS)} with torchrun (the reference)")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="videorl-ray-bench-"))
    config, overrides = prepare(workdir, args.prompts, args.n, args.steps)
    overrides.append(f"trainer.max_steps={args.steps}")

    stage_times: dict[str, dict[str, list[float]]] = {k: defaultdict(list) for k in launchers}
    walls: dict[str, list[float]] = defaultdict(list)
    extra: dict[str, dict[str, list[float]]] = {k: defaultdict(list) for k in launchers}
    losses: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for name in launchers:
            result = run_once(name, config, overrides, workdir / name)
            walls[name].append(result["wall"])
            rows = result["rows"]
            loss = [r["actor/loss"] for r in rows]
            if losses.setdefault(name, loss) != loss:
                raise SystemExit(f"{name}: another round logged other losses: {loss} vs {losses[name]}")
            for row in rows[1:]:
                for stage in STAGES:
                    stage_times[name][stage].append(row.get(f"time/{stage}", 0.0))
                for key in (
                    "ray/sent_bytes_per_sample",
                    "ray/received_bytes_per_sample",
                    "ray/weight_sync_bytes",
                    "tokens/step",
                ):
                    if key in row:
                        extra[name][key].append(row[key])
    reference = losses["torchrun"]
    same = {
        name: max(abs(a - b) for a, b in zip(loss, reference, strict=True)) for name, loss in losses.items()
    }

    report: dict[str, Any] = {
        "steps": args.steps,
        "rounds": args.rounds,
        "prompts": args.prompts,
        "n": args.n,
        "cpus": os.cpu_count(),
        "max_loss_difference_to_torchrun": same,
    }
    for name in launchers:
        medians = {stage: statistics.median(values) for stage, values in stage_times[name].items()}
        entry: dict[str, Any] = {
            "seconds": {k: round(v, 4) for k, v in medians.items()},
            "wall_seconds": round(statistics.median(walls[name]), 2),
            **{k: statistics.median(v) for k, v in extra[name].items()},
        }
        if name != "torchrun":
            base = stage_times["torchrun"]
            entry["step_ratio_to_torchrun"] = round(medians["step"] / statistics.median(base["step"]), 3)
            entry["wall_ratio_to_torchrun"] = round(
                entry["wall_seconds"] / statistics.median(walls["torchrun"]), 3
            )
        report[name] = entry
    print(json.dumps(report))


if __name__ == "__main__":
    main()
