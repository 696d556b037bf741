"""``scripts/gpu-check.sh`` on a GPU machine that has only Python, torch and transformers (and pluggy,
peft, pyarrow, numpy) and reaches no package index: every package the check needs beyond those is in
``scripts/gpu-wheels.txt`` and its missing-package check; and the check itself runs (``--shape tiny``,
on the CPU here)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

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
def test_the_check_runs_on_the_tiny_model(tmp_path: Path) -> None:
    args = ["--shape", "tiny", "--steps", "1", "--frames", "4", "--side", "56", "--n", "2", "--response", "8"]
    env = {**os.environ, "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    (step,) = out["steps"]
    assert step["rollout"]["generated_tokens"] > 0 and math.isfinite(step["update"]["loss"])
