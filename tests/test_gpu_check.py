"""``scripts/gpu-check.sh`` on a GPU machine that has only Python, torch and transformers (and pluggy,
peft, pyarrow, numpy) and reaches no package index: every package the check needs beyond those is in
``scripts/gpu-wheels.txt`` and its missing-package check; and the check itself runs (``--cpu-smoke``:
the tiny model, the phases a CPU runs)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
#: what the GPU machine has besides torch and transformers (and their own requirements)
MACHINE = {"torch", "transformers", "pluggy", "peft", "pyarrow", "numpy"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def _closure(names: set[str]) -> set[str]:
    """``names`` and their installed requirements, transitively (extras left out)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return seen


def _wheels() -> dict[str, str]:
    lines = (ROOT / "scripts" / "gpu-wheels.txt").read_text().splitlines()
    return {
        _name(pin): module
        for pin, module in (line.split() for line in lines if line.strip() and not line.startswith("#"))
    }


def test_every_package_beyond_the_machine_travels_as_a_wheel() -> None:
    core = tomllib.loads((ROOT / "core" / "pyproject.toml").read_text())["project"]["dependencies"]
    models = tomllib.loads((ROOT / "plugins" / "models" / "pyproject.toml").read_text())["project"]
    needed = {_name(r) for r in core} | {_name(r) for r in models["dependencies"] if "videorl" not in r}
    needed.add("torchvision")  # transformers' Qwen video processors import it
    have = _closure(MACHINE)
    wheels = _wheels()
    assert needed - have - set(wheels) == set()
    assert {"av", "pillow", "click", "torchvision"} <= set(wheels)  # not among the machine's packages
    assert len(set(wheels)) == len(wheels)  # one version of each


def test_the_missing_package_check_names_every_wheel_and_stops(tmp_path: Path) -> None:
    """A Python without site-packages lacks every listed module: the script names them all (PyAV too)
    and stops before running anything, since there is no wheel folder."""
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    env = {**os.environ, "PYTHON": str(python), "WHEELS": str(tmp_path / "none")}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu-check.sh")], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 2, done.stderr
    for pin in (ROOT / "scripts" / "gpu-wheels.txt").read_text().splitlines():
        if pin.strip() and not pin.startswith("#"):
            assert pin.split()[0] in done.stderr


@pytest.mark.slow
def test_the_cpu_smoke_runs_every_cpu_phase_and_prints_one_json_line_each(tmp_path: Path) -> None:
    """``--cpu-smoke``: the GRPO steps, FSDP2 on gloo at world size 1 (sharded load, the refresh's
    gather, a DCP round trip) and packed against padded log-probs on sdpa, on the tiny model."""
    env = {**os.environ, "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--cpu-smoke"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    rows = {row["phase"]: row for row in map(json.loads, done.stdout.strip().splitlines())}
    assert list(rows) == ["machine", "steps", "fsdp", "packed"]
    assert rows["machine"]["device"] == "cpu" and rows["machine"]["shape"] == "tiny"
    assert all(rows[p]["ok"] is True and rows[p]["seconds"] > 0 for p in ("steps", "fsdp", "packed"))
    (step,) = rows["steps"]["steps"]
    assert step["rollout"]["generated_tokens"] > 0 and math.isfinite(step["update"]["loss"])
    fsdp = rows["fsdp"]
    assert fsdp["backend"] == "gloo" and fsdp["sharded_on_device"] and fsdp["gathered_on_device"]
    assert fsdp["gathered_tensors"] > 0 and fsdp["gather_mismatches"] == []
    assert fsdp["master_dtype"] == "torch.float32" and fsdp["grads_fp32"] and fsdp["dcp"]["equal"]
    assert fsdp["dcp"]["bytes"] > 0 and fsdp["tokens_per_s"] > 0
    packed = rows["packed"]
    assert packed["attention"] == "sdpa" and packed["sequences"] == 4  # 2 prompts x n=2
    assert packed["response_tokens"] == 4 * 8 and packed["max_abs_diff"] <= packed["tolerance"]["token"]


def test_a_phase_that_fails_is_reported_and_the_others_still_run() -> None:
    """``run_phase``: a failing body is a line with ``ok: false``, the error and where; a skip says why."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_phases import Skip, run_phase

    ctx = SimpleNamespace(cuda=False, torch=None)

    def broken(ctx: object) -> dict[str, object]:
        raise ValueError("bad shard")

    def absent(ctx: object) -> dict[str, object]:
        raise Skip("vLLM is not importable")

    row = run_phase("fsdp", broken, ctx)  # type: ignore[arg-type]
    assert row["ok"] is False and row["error"] == "ValueError: bad shard" and "broken" in row["at"][-1]
    row = run_phase("vllm", absent, ctx)  # type: ignore[arg-type]
    assert row["ok"] is None and row["skip"] == "vLLM is not importable" and row["peak_gb"] is None
