"""Fixtures of videorl-models' tests: tiny checkpoints (built once per session) and synthetic media."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tiny_dir(model_type)``: a tiny random checkpoint of that type, built once per session."""
    from videorl_models.tiny import build_tiny

    built: dict[str, Path] = {}

    def get(model_type: str) -> Path:
        if model_type not in built:
            built[model_type] = build_tiny(model_type, tmp_path_factory.mktemp("tiny") / model_type, seed=0)
        return built[model_type]

    return get


@pytest.fixture(scope="session")
def backend_for(tiny_dir: Callable[[str], Path]) -> Callable[[str], Any]:
    """``backend_for(model_type)``: the registered backend for that tiny checkpoint (cached)."""
    from videorl.api import backend_for_model
    from videorl.plugins import load_plugins

    registry = load_plugins().model_backends
    cache: dict[str, Any] = {}

    def get(model_type: str) -> Any:
        if model_type not in cache:
            cache[model_type] = backend_for_model(tiny_dir(model_type), registry)
        return cache[model_type]

    return get


@pytest.fixture(scope="session")
def model_for(backend_for: Callable[[str], Any]) -> Callable[[str], Any]:
    """``model_for(model_type)``: the tiny model in fp32, loaded once."""
    cache: dict[str, Any] = {}

    def get(model_type: str) -> Any:
        if model_type not in cache:
            cache[model_type] = backend_for(model_type).load_model()
        return cache[model_type]

    return get


def make_video(
    factor: int, *, frames: int = 3, rows: int = 2, cols: int = 3, seed: int = 0
) -> tuple[Any, Any]:
    """Random uint8 frames (``frames×3×(rows·factor)×(cols·factor)``) sampled at source indices 0, 10, 20, ...

    of a 10 fps, 30-frame source, with their hand-made ``VideoMetadata``.
    """
    import torch

    from videorl.media import VideoMetadata

    gen = torch.Generator().manual_seed(seed)
    h, w = rows * factor, cols * factor
    tensor = torch.randint(0, 256, (frames, 3, h, w), dtype=torch.uint8, generator=gen)
    indices = tuple(10 * i for i in range(frames))
    meta = VideoMetadata(
        source_fps=10.0,
        total_frames=10 * frames,
        duration=float(frames),
        frame_indices=indices,
        timestamps=tuple(i / 10 for i in indices),
        source_width=2 * w,
        source_height=2 * h,
        width=w,
        height=h,
    )
    return tensor, meta


def make_image(factor: int, *, rows: int = 1, cols: int = 2, seed: int = 1) -> Any:
    import torch

    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (3, rows * factor, cols * factor), dtype=torch.uint8, generator=gen)


@pytest.fixture
def media() -> Any:
    """The helpers ``make_video`` and ``make_image``, as attributes."""
    from types import SimpleNamespace

    return SimpleNamespace(video=make_video, image=make_image)
