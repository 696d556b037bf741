"""Shared fixtures of the cross-distribution tests: tiny models built locally, once per session."""

from __future__ import annotations

import os
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
