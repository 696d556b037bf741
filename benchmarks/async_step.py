"""What asynchronous training buys: steps/s on Ray's split placement, synchronous vs ``max_staleness``.

Prints one JSON line. The demo task (tiny random Qwen2.5-VL, cached synthetic clips, hf engine) runs
``--steps`` steps with one actor worker and one rollout worker (one CPU each, plus the reward worker)
under ``videorl train --ray ray.placement=split``, three ways, alternated ``--rounds`` times so that a
busy neighbour slows all alike:

- ``sync``: ``trainer.max_staleness=0`` (the synchronous controller: generate, then update, then sync);
- ``staleness_1`` / ``staleness_2``: the asynchronous controller, rollouts 1 or 2 steps ahead
  (``algorithm.rollout_correction=tis`` in all three, so they train the same loss).

Per mode, over steps 2.. (step 1 warms up), the medians over rounds of: steps/s (steps over the sum
of ``time/step``), the seconds per step each worker idles (the step's wall time less what the worker
was busy: ``time/rollout`` for the rollout worker, ``time/actor`` for the actor worker), the actor's
wait for its groups (``time/rollout_wait``), the mean and max staleness, and the ratio of steps/s to
``sync``. The issue's target is a ratio of at least 1.5 at staleness 1 on a 2-core machine.
``parallelism`` (before the runs and after each round) says how much of that the machine allowed at
the time: two single-threaded matrix-multiply processes at once against one (2.0: two free cores;
1.0: one, and then overlapping rollout and update cannot shorten a step, only its idle time).

Usage: ``python benchmarks/async_step.py [--steps 8] [--rounds 2] [--prompts 4] [--n 4]
[--response-length 48] [--modes sync,staleness_1,staleness_2] [--probe-matmuls 1500] [--workdir DIR]``
(``--modes`` and ``--probe-matmuls``: fewer runs and a shorter ``parallelism`` probe, for a quick
check; ``--probe-matmuls 0`` skips the probe, and the line says so). With ``--learning STEPS`` it
instead trains the demo with its own settings synchronously and at staleness 1 and writes both
held-out accuracy curves to ``learning.png`` (the issue's learning criterion: staleness 1 reaches 0.9
within the synchronous run's steps).
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
from pathlib import Path
from typing import Any

MODES = {"sync": 0, "staleness_1": 1, "staleness_2": 2}


def prepare(workdir: Path, prompts: int, n: int, steps: int, response_length: int) -> tuple[Path, list[str]]:
    """The demo task's data and model under ``workdir``; the config file and overrides of a run."""
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
        f"rollout.max_response_length={response_length}",
        "algorithm.rollout_correction=tis",
        "trainer.save_every=0",
        "trainer.val_every=0",
        "trainer.progress_bar=false",
        "data.val_files=[]",
        *ray_args(),
    ]
    return config, overrides


def run_mode(config: Path, overrides: list[str], out: Path, staleness: int) -> list[dict[str, Any]]:
    """One training run at ``staleness``; its metrics rows."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "videorl.cli", "train", str(config), *overrides]
    command += [f"output_dir={out}", f"trainer.max_staleness={staleness}"]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"staleness {staleness} failed:\n{done.stderr[-4000:]}")
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def summarise(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Steps/s and per-step idle seconds over steps 2.. of one run."""
    steady = rows[1:]
    wall = sum(r["time/step"] for r in steady)
    mean = lambda key: sum(r.get(key, 0.0) for r in steady) / len(steady)  # noqa: E731
    return {
        "steps_per_s": len(steady) / wall,
        "step_s": wall / len(steady),
        "rollout_idle_s": wall / len(steady) - mean("time/rollout"),
        "actor_idle_s": wall / len(steady) - mean("time/actor"),
        "rollout_wait_s": mean("time/rollout_wait"),
        "staleness_mean": mean("async/staleness_mean"),
        "staleness_max": max(r.get("async/staleness_max", 0.0) for r in rows),
        "accuracy_last": steady[-1].get("accuracy/overall", 0.0),
    }


PROBE = (
    "import sys, time, torch; torch.set_num_threads(1); a = torch.randn(256, 256); t = time.perf_counter()\n"
    "for _ in range(int(sys.argv[1])): a @ a\n"
    "print(time.perf_counter() - t)"
)


def parallelism(matmuls: int) -> float:
    """How much faster two single-threaded processes get through two units of work (``matmuls``
    256 x 256 products each) at once than one after the other, on this machine now: 2.0 with two
    free cores, 1.0 when only one is free (then no overlap of rollout and update can speed a step up)."""

    def probe(count: int) -> float:
        command = [sys.executable, "-c", PROBE, str(matmuls)]
        procs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(count)]
        return max(float(p.communicate()[0]) for p in procs)

    return round(2 * probe(1) / probe(2), 2)


def learning(workdir: Path, steps: int) -> dict[str, Any]:
    """The demo's own settings (``videorl demo``: its task, 96 training clips, 64 held out, 16 prompts
    × 8 responses, validation every ``steps // 6``) synchronously and at staleness 1 on the split
    placement; both held-out accuracy curves in ``workdir/learning.png``; the first step of each
    reaching 0.9 and its last accuracy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from videorl import demo
    from videorl.plugins import load_plugins

    task = workdir / "learning-task"
    model, train, val = demo.prepare(
        task, load_plugins(), family="qwen2_5_vl", seed=0, train=96, val=64, task=demo.DEFAULT_TASK
    )
    config = workdir / "empty.yaml"
    config.write_text("seed: 0\n")
    overrides = [
        *demo.demo_overrides(task, model, train, val, steps=steps, seed=0, engine="hf"),
        "algorithm.rollout_correction=tis",
        "trainer.save_every=0",
        "trainer.progress_bar=false",
        *ray_args(),
    ]
    out: dict[str, Any] = {}
    figure, axes = plt.subplots(figsize=(6, 4))
    for mode in ("sync", "staleness_1"):
        rows = run_mode(config, overrides, workdir / f"learning-{mode}", MODES[mode])
        curve = [(r["step"], r["val/accuracy/overall"]) for r in rows if "val/accuracy/overall" in r]
        first = next((step for step, acc in curve if acc >= 0.9), None)
        out[mode] = {"first_step_at_0.9": first, "last_accuracy": curve[-1][1], "curve": curve}
        axes.plot(*zip(*curve), marker="o", label=mode)
    axes.set(xlabel="step", ylabel="held-out accuracy", title="demo on Ray split: sync vs max_staleness=1")
    axes.legend()
    figure.savefig(workdir / "learning.png", dpi=100, bbox_inches="tight")
    out["png"] = str(workdir / "learning.png")
    return out


def ray_args() -> list[str]:
    """The placement every mode runs on: split, one actor and one rollout worker of one CPU each."""
    return [
        "--ray",
        "ray.placement=split",
        "ray.actor_workers=1",
        "ray.rollout_workers=1",
        "ray.cpus_per_worker=1",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--response-length", type=int, default=48)
    parser.add_argument(
        "--modes", default=",".join(MODES), help="comma-separated subset of " + ",".join(MODES)
    )
    parser.add_argument(
        "--probe-matmuls", type=int, default=1500, help="the work of parallelism(); 0 skips the probe"
    )
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--learning",
        type=int,
        default=0,
        metavar="STEPS",
        help="instead: the demo's own run of STEPS steps, sync and staleness 1, curves in learning.png",
    )
    args = parser.parse_args()
    if args.learning:
        workdir = args.workdir or Path(tempfile.mkdtemp(prefix="videorl-async-"))
        print(json.dumps(learning(workdir, args.learning)))
        return
    modes = [m.strip() for m in args.modes.split(",")]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="videorl-async-"))
    config, overrides = prepare(workdir, args.prompts, args.n, args.steps, args.response_length)
    results: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    probe = args.probe_matmuls > 0
    probes = [parallelism(args.probe_matmuls)] if probe else []
    for r in range(args.rounds):
        for mode in modes:
            out = workdir / f"{mode}-{r}"
            shutil.rmtree(out, ignore_errors=True)
            results[mode].append(summarise(run_mode(config, overrides, out, MODES[mode])))
        if probe:
            probes.append(parallelism(args.probe_matmuls))
    report: dict[str, Any] = {
        "steps": args.steps,
        "rounds": args.rounds,
        "prompts": args.prompts,
        "n": args.n,
        "response_length": args.response_length,
        "cpus": os.cpu_count(),
        # before the runs and after each round (see parallelism())
        "parallelism": probes or "not measured (--probe-matmuls 0)",
    }
    for mode, runs in results.items():
        report[mode] = {key: round(statistics.median(run[key] for run in runs), 4) for key in runs[0]}
    if "sync" in results:
        base = report["sync"]["steps_per_s"]
        for mode in modes:
            if mode != "sync":
                report[f"ratio_{mode}"] = round(report[mode]["steps_per_s"] / base, 3)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
