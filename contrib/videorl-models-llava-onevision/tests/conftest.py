"""Fixtures: the plugin importable without installing it, and a tiny checkpoint built once per module."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
try:
    import videorl_models_llava_onevision  # noqa: F401 - installed
except ImportError:  # running from a checkout: use the sources
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from videorl_models_llava_onevision.tiny import build_tiny

    return build_tiny(tmp_path_factory.mktemp("llava") / "tiny", seed=0)


@pytest.fixture(scope="session")
def backend(tiny: Path) -> Any:
    from videorl_models_llava_onevision.backend import LlavaOnevisionBackend

    return LlavaOnevisionBackend(tiny)


@pytest.fixture(scope="session")
def model(backend: Any) -> Any:
    return backend.load_model()
