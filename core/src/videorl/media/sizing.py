"""Frame sizes: fit a pixel budget with height and width multiples of the backend's factor.

The arithmetic is that of qwen-vl-utils' ``smart_resize``, so that frames cached here have the size
the Qwen processors would have chosen (``round`` is Python's, ties to even, as there).
"""

from __future__ import annotations

import math

from videorl.errors import DataError

MAX_ASPECT_RATIO = 200


def round_by(value: float, factor: int) -> int:
    """The multiple of ``factor`` nearest to ``value``."""
    return round(value / factor) * factor


def floor_by(value: float, factor: int) -> int:
    """The largest multiple of ``factor`` not above ``value``."""
    return math.floor(value / factor) * factor


def ceil_by(value: float, factor: int) -> int:
    """The smallest multiple of ``factor`` not below ``value``."""
    return math.ceil(value / factor) * factor


def fit_to_budget(
    height: int, width: int, *, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """``(height, width)``: multiples of ``factor``, aspect ratio kept, area within the budget.

    The area never exceeds ``max_pixels``: where the short side would fall below ``factor`` (a very
    wide or tall frame) it is ``factor`` and the long side is cut to fit, so the aspect ratio is not
    kept there (qwen-vl-utils keeps the ratio closer and exceeds ``max_pixels``)."""
    if height < 1 or width < 1:
        raise DataError(f"frame size {width}x{height} is empty")
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise DataError(
            f"frame size {width}x{height} has an aspect ratio above {MAX_ASPECT_RATIO}; crop or pad it first"
        )
    h = max(factor, round_by(height, factor))
    w = max(factor, round_by(width, factor))
    if h * w > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(factor, floor_by(height / beta, factor))
        w = max(factor, floor_by(width / beta, factor))
        if h * w > max_pixels:  # one side was raised to ``factor``: the other gives way
            if h == factor:
                w = max(factor, floor_by(max_pixels / h, factor))
            else:
                h = max(factor, floor_by(max_pixels / w, factor))
    elif h * w < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = ceil_by(height * beta, factor)
        w = ceil_by(width * beta, factor)
    return h, w


def frame_pixel_cap(
    num_frames: int, *, min_pixels: int, max_pixels: int, total_pixels: int | None, temporal_patch_size: int
) -> int:
    """The per-frame ``max_pixels`` once ``total_pixels`` (per temporal patch) is shared by the frames."""
    if total_pixels is None:
        return max_pixels
    share = total_pixels * temporal_patch_size // max(num_frames, 1)
    return min(max_pixels, max(min_pixels, share))
