"""Which frames to keep: a count from the target fps, then the frames nearest to evenly spaced times."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from videorl.media.params import DecodeParams
from videorl.media.sizing import ceil_by, floor_by


def num_frames(total_frames: int, duration: float, params: DecodeParams) -> int:
    """How many frames to sample: ``duration × fps`` within ``[min_frames, max_frames]``, no more than
    the video holds, rounded down to a multiple of the temporal patch size.

    A video with fewer frames than one temporal patch still gives one patch (its frames repeat).
    """
    tps = params.temporal_patch_size
    low = ceil_by(params.min_frames, tps)
    high = floor_by(params.max_frames, tps)
    n = min(max(duration * params.fps, low), high, total_frames)
    return max(floor_by(n, tps), tps)


def nearest_frames(pts: np.ndarray, n: int) -> np.ndarray:
    """Indices of the frames nearest to ``n`` evenly spaced times from the first to the last frame.

    ``pts`` are the presentation timestamps of all frames, sorted, in integer stream ticks; the
    arithmetic is exact (integers), ties go to the earlier frame. For a constant-rate video this is
    ``linspace(0, total - 1, n)`` rounded; for a variable-rate one the samples stay evenly spaced in
    time rather than in frame count.
    """
    pts = np.asarray(pts, dtype=np.int64)
    if pts.size == 0:
        raise ValueError("no frames to sample from")
    d = max(n - 1, 1)
    scaled = pts * d
    targets = pts[0] * d + (pts[-1] - pts[0]) * np.arange(n, dtype=np.int64)
    right = np.clip(np.searchsorted(scaled, targets, side="left"), 0, pts.size - 1)
    left = np.clip(right - 1, 0, pts.size - 1)
    take_left = (targets - scaled[left]) <= (scaled[right] - targets)
    return np.where(take_left, left, right)


def frames_in_range(pts: np.ndarray, time_base: Fraction, start: float, end: float | None) -> tuple[int, int]:
    """``(first, stop)``: the slice of ``pts`` shown during ``[start, end)`` seconds from the first frame,
    i.e. from the frame on screen at ``start`` to the last one that begins before ``end`` (``None``: the
    end of the video). ``pts`` are sorted integer stream ticks; bounds are taken as the decimals written
    (``0.1`` is 1/10 s), and the arithmetic is exact. ``start`` must lie before the end of the video.
    """
    origin = int(pts[0])
    first_tick = origin + math.floor(Fraction(str(start)) / time_base)
    first = max(int(np.searchsorted(pts, first_tick, side="right")) - 1, 0)
    if end is None:
        return first, int(pts.size)
    stop = int(np.searchsorted(pts, origin + math.ceil(Fraction(str(end)) / time_base), side="left"))
    return first, max(stop, first + 1)
