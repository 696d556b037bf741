"""Every script in ``benchmarks/`` runs on main with its defaults, at a tiny size, and prints its JSON line.

The scripts are found by glob, so a new benchmark is covered as soon as it lands; :data:`TINY` names, for
each one, the arguments that shrink it (its defaults otherwise), and an unknown script fails here until it
gets an entry. The figures themselves are the scripts' business (docs/benchmarks.md); this only keeps
every published figure reproducible from main.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_"))

#: per script: the arguments of a tiny run (everything else at its default)
TINY: dict[str, str] = {
    "agent_step.py": "--prompts 1 --n 2 --frames 4 --tokens 2 --rounds 1 --calls 5",
    "algorithms.py": "--steps 1 --presets grpo --train-clips 4 --val-clips 2",
    # step 1 is warm-up; one asynchronous mode runs as the others do (and sync as the controller tests do);
    # no parallelism probe (its three processes importing torch, twice)
    "async_step.py": "--steps 2 --rounds 1 --prompts 1 --n 2 --response-length 4 --modes staleness_1 "
    "--probe-matmuls 0",
    "benchmark_workers.py": "--videos 1 --steps 1 --every 1",
    "checkpoint.py": "--mb 1 --repeats 1",
    "data_path.py": "--repeats 1 --hd-seconds 1 --build-clips 2 --build-seconds 1 --build-rounds 1",
    "eval_pipeline.py": "--videos 2 --workers 1 --batch-size 2 --repeats 1",
    "hf_rollout.py": "--n 2 --prompts 1 --frames 2 --tokens 2 --repeats 1",
    "host_memory.py": "--steps 1 --prompts 1 --frames 2 --size 56",
    "in_loop_eval.py": "--videos 1 --steps 1 --repeats 1",
    "lora.py": "",  # one step of the tiny demo model; the 8B part is arithmetic on the meta device
    "overhead.py": "--steps 1 --warmup 0 --threads 1",
    "packed_update.py": "--rows 2 --max-frames 2 --response 4 --width 64 --layers 1 --rounds 1",
    "prefetch.py": "--steps 2 --prompts 1 --seconds 1 --io-delay 0.01 --update 0.01",
    # step 1 is warm-up; one Ray placement runs as the other does
    "ray_step.py": "--steps 2 --rounds 1 --prompts 2 --n 2 --launchers torchrun,ray_split",
    "rewards.py": "--rows 20 --repeats 1 --code-rows 2",
    "sequence_parallel.py": "--sizes 1,2 --frames 4 --side 56 --response 4 --width 64 --limit 8",
    "train_step.py": "--prompts 1 --n 2 --response 4 --warmup 0 --rounds 1 --size 64x64 --seconds 2 "
    "--frames 4 --max-pixels 1024 --threads 1",
    "vision_once.py": "--n 2 --prompts 1 --frames 2 --response 4 --width 64 --layers 1 --repeats 1",
    "update_memory.py": "--frames 2 --rows 1 --response 4",
    "weight_refresh.py": "--widths 64 --repeats 1 --modes inproc",
}


def test_every_benchmark_has_a_tiny_size() -> None:
    unknown = sorted(set(SCRIPTS) - set(TINY))
    assert not unknown, (
        f"benchmarks without a tiny size: add them to TINY in {Path(__file__).name}: {unknown}"
    )
    assert not set(TINY) - set(SCRIPTS), "TINY names scripts that no longer exist"


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_the_benchmark_prints_its_json_line_at_a_tiny_size(script: str, tmp_path: Path) -> None:
    if script not in TINY:
        pytest.fail(f"benchmarks/{script} has no tiny size: add it to TINY in {Path(__file__).name}")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # TMPDIR stays: Ray's socket paths must stay short
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *TINY[script].split()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"benchmarks/{script} failed:\n{done.stderr[-4000:]}"
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines, f"benchmarks/{script} printed nothing"
    report = json.loads(lines[-1])  # the JSON line is the script's last output
    assert isinstance(report, dict) and report, lines[-1][:500]
