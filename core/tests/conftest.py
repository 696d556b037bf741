"""Shared fixtures of core's tests: small synthetic videos written with PyAV in a temporary folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def make_clip(tmp_path: Path) -> Callable[..., Path]:
    """``make_clip(name, frames=60, fps=30, height=112, width=224, **write_video_options)``: an H.264
    clip whose frame ``i`` shows ``i`` as stripes (read back with ``videorl.media.synthetic.read_index``)."""
    from videorl.media.synthetic import index_frames, write_video

    def make(
        name: str = "clip.mp4",
        *,
        frames: int = 60,
        fps: float = 30.0,
        height: int = 112,
        width: int = 224,
        **options: Any,
    ) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_video(path, index_frames(frames, height, width), fps=fps, **options)

    return make
