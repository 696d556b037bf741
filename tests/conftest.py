"""Shared fixtures of the cross-distribution tests: tiny models built locally, once per session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tiny_model_dir(family)``: a tiny random checkpoint of that family (built once per session)."""
    from videorl_models.tiny import build_tiny

    built: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in built:
            built[family] = build_tiny(family, tmp_path_factory.mktemp("tiny") / family, seed=0)
        return built[family]

    return get


@pytest.fixture(scope="session")
def lora_overrides() -> Callable[..., list[str]]:
    """``lora_overrides(task, model, train, val, run, *extra, engine="hf")``: the ``videorl train``
    overrides of the LoRA runs (tests/test_lora.py, and its vLLM run in tests/test_train_vllm.py): two
    steps of rank-4 adapters with the KL loss on the demo task, two clips a step, a checkpoint each."""
    from videorl import demo

    def overrides(
        task: Path, model: Path, train: Path, val: Path, run: Path, *extra: str, engine: str = "hf"
    ) -> list[str]:
        return [
            *demo.demo_overrides(task, model, train, val, steps=2, seed=1, engine=engine),
            f"output_dir={run}",
            "data.rollout_batch_size=2",
            "actor.global_batch_size=2",
            "rollout.n=4",
            "trainer.save_every=1",
            "trainer.val_every=0",
            "trainer.progress_bar=false",
            "algorithm.use_kl_loss=true",
            "actor.lora.enabled=true",
            "actor.lora.rank=4",
            "optim.lr=0.02",  # large enough that the adapters move visibly in two steps
            *extra,
        ]

    return overrides


@pytest.fixture(scope="session")
def vllm_env() -> dict[str, str]:
    """What a subprocess that runs vLLM's CPU build adds to ``os.environ`` (read at the subprocess's
    start: each test has a home of its own): the engine in that one process
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: it starts in seconds), a 1 GiB KV cache, one thread, and
    tests/ on ``PYTHONPATH`` for the probe scripts' ``import vllm_probe``."""
    return {
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")])
        ),
    }


def _build_litter(folder: Path) -> list[str]:
    """What a build leaves in a source folder: build/ and *.egg-info anywhere in it."""
    return sorted(
        str(p.relative_to(folder)) for p in folder.rglob("*") if p.name == "build" or p.suffix == ".egg-info"
    )


@pytest.fixture(scope="session")
def install_plugin() -> Callable[[Path, Path], Path]:
    """``install_plugin(project, tmp)``: install a plugin folder as a user would, and return the site folder.

    A wheel is built from a copy of ``project`` (so nothing is written into the checkout, which is
    asserted) and ``pip install --no-deps --target tmp/site``-ed; put the site folder on PYTHONPATH.
    """

    def install(project: Path, tmp: Path) -> Path:
        before = _build_litter(project)
        source = tmp / "build-copy" / project.name
        shutil.copytree(
            project,
            source,
            ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".pytest_cache"),
        )
        wheels = tmp / "wheels"
        pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
        subprocess.run(
            [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)],
            check=True,
            capture_output=True,
        )
        (wheel,) = wheels.glob("*.whl")
        site = tmp / "site"
        subprocess.run(
            [*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
            check=True,
            capture_output=True,
        )
        assert _build_litter(project) == before, f"building {project.name} wrote into its folder"
        return site

    return install
