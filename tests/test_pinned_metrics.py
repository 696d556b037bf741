"""Metrics pinned across refactors: a few steps of one seed give the same numbers, under one process,
torchrun and Ray, as the code that recorded ``data/pinned_metrics.json`` (the module layout may change
under a run; its results may not).

Regenerate the file only for a change that is meant to alter results, and say which in the commit:
``python tests/test_pinned_metrics.py --record``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

PINNED = Path(__file__).parent / "data" / "pinned_metrics.json"
# Everything a step computes; wall times and byte counts of the transport are not results.
SKIPPED = ("time", "ray/", "step", "progress/")
MODES = {
    "local": [],
    "torchrun": ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"],
    "ray": ["--ray", "ray.actor_workers=2"],
}


def _prepare(out: Path) -> list[str]:
    from videorl import demo
    from videorl.plugins import load_plugins

    model, train, val = demo.prepare(out, load_plugins(), family="qwen2_5_vl", seed=0, train=4, val=2)
    (out / "empty.yaml").write_text("seed: 11\n")
    return [
        *demo.demo_overrides(out, model, train, val, steps=2, seed=11, engine="hf"),
        "data.rollout_batch_size=2",
        "actor.global_batch_size=1",  # two optimizer steps per step: old log-probs are computed
        "rollout.n=4",
        "trainer.val_every=2",
        "trainer.progress_bar=false",
        "algorithm.use_kl_loss=true",
    ]


def _run(mode: str, out: Path, overrides: list[str]) -> list[dict[str, Any]]:
    run = out / mode
    args = MODES[mode]
    launch = [*args, "-m", "videorl.cli"] if mode == "torchrun" else ["-m", "videorl.cli"]
    flags = args if mode == "ray" else []
    command = [sys.executable, *launch, "train", str(out / "empty.yaml"), *overrides, f"output_dir={run}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([*command, *flags], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(SKIPPED) and isinstance(v, float)} for r in rows]


def _machine() -> dict[str, str]:
    """The CPU model and library versions the numbers depend on (sampling follows the logits' last bits)."""
    import importlib.metadata

    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")
    versions = {name: importlib.metadata.version(name) for name in ("torch", "transformers")}
    return {"cpu": cpu, **versions}


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    out = tmp_path_factory.mktemp("pinned")
    return out, _prepare(out)


@pytest.mark.parametrize(
    "mode",
    ["local", pytest.param("torchrun", marks=pytest.mark.slow), pytest.param("ray", marks=pytest.mark.slow)],
)
def test_metrics_equal_the_pinned_ones(task: tuple[Path, list[str]], mode: str) -> None:
    recorded = json.loads(PINNED.read_text())
    if recorded["machine"] != _machine():
        pytest.skip(
            f"pinned on {recorded['machine']}, this is {_machine()}: float32 kernels round differently"
        )
    pinned = recorded[mode]
    rows = _run(mode, *task)
    assert len(rows) == len(pinned)
    for got, expected in zip(rows, pinned):
        assert sorted(got) == sorted(expected)
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (mode, key)


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        overrides = _prepare(Path(tmp))
        runs = {m: _run(m, Path(tmp), overrides) for m in MODES}
        PINNED.write_text(json.dumps({"machine": _machine(), **runs}, indent=1) + "\n")
