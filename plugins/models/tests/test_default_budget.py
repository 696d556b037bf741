"""The default visual budget of every Qwen-VL family (its backend's ``budget``, which the ``data``
section takes unless it sets a key) fits the default prompt limit, counted with each backend's own
arithmetic: its grids, merge size and, for Qwen3, the timestamp tokens of every frame."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from videorl.api import PromptInput
from videorl.config import load_config
from videorl.media import DecodeParams
from videorl.media.metadata import VideoMetadata
from videorl.media.sampling import num_frames
from videorl.media.sizing import fit_to_budget

#: room left for the question, options and template text beside the video
TEXT_HEADROOM = 2048
#: 16:9 and 4:3 sources, portrait, and the aspect ratio that wastes least of a 28-pixel grid
SOURCES = [(1920, 1080), (640, 480), (1080, 1920), (71, 3100)]


def _worst_video_tokens(
    backend: Any, seconds: float = 64.0, fps: float = 30.0
) -> tuple[int, tuple[int, int]]:
    """The longest prompt of a ``seconds``-long video at the default budget (and its frame size)."""
    import torch

    params = DecodeParams.from_budget(
        backend.budget, factor=backend.factor, temporal_patch_size=backend.temporal_patch_size
    )
    total = int(seconds * fps)
    count = num_frames(total, seconds, params)
    step = (total - 1) / (count - 1)
    indices = tuple(round(i * step) for i in range(count))
    worst = (0, (0, 0))
    for width, height in SOURCES:
        h, w = fit_to_budget(
            height, width, factor=params.factor, min_pixels=params.min_pixels, max_pixels=params.max_pixels
        )
        meta = VideoMetadata(
            source_fps=fps,
            total_frames=total,
            duration=seconds,
            frame_indices=indices,
            timestamps=tuple(i / fps for i in indices),
            source_width=width,
            source_height=height,
            width=w,
            height=h,
        )
        frames = torch.zeros((), dtype=torch.uint8).expand(count, 3, h, w)  # shapes are all that is counted
        prompt = PromptInput("budget", "Which option is right?", videos=[(frames, meta)])
        worst = max(worst, (backend.prompt_length(prompt), (w, h)))
    return worst


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_the_default_video_budget_fits_the_default_prompt_limit(
    model_type: str, backend_for: Callable[[str], Any]
) -> None:
    tokens, size = _worst_video_tokens(backend_for(model_type))
    limit = load_config(None, ["model.path=/m", "data.train_files=[/d.jsonl]"]).data.max_prompt_length
    assert tokens + TEXT_HEADROOM <= limit, (model_type, tokens, size)


def test_qwen2_5_vl_needs_more_than_the_seed_limit(backend_for: Callable[[str], Any]) -> None:
    """By hand: a 16:9 frame is fitted to 672×364 (24×13 merged patches = 312 tokens per temporal
    patch), 128 frames are 64 temporal patches: 19,968 visual tokens; the 71×3100 source fits to
    84×3108 (3×111 = 333): 21,312, over the seed's 20,000."""
    backend = backend_for("qwen2_5_vl")
    tokens, size = _worst_video_tokens(backend)
    assert size == (84, 3108)
    assert 21_312 < tokens < 21_312 + 64  # the visual tokens and the template's few text tokens
    assert tokens > 20_000
