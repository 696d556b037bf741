"""Which frames to keep: a count from the target fps, then the frames nearest to evenly spaced times."""

from __future__ import annotations

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
