"""What the evaluator gives the model for one benchmark row: cached frames (clip applied), image, prompt.

Videos go through the frame cache (:class:`videorl.media.MediaCache`), built on first use, so a
benchmark evaluated twice, or by several checkpoints sharing a cache, is decoded once. Images are
decoded on the fly to their own budget (they are cheap and the cache holds videos only).

Clip bounds (``row.clip``): the data path samples a whole video (its cache key has no time range),
so a clip is honoured by keeping the sampled frames whose timestamps fall inside it — see
:data:`CLIP_POLICY` and :func:`clip_frames`. A clip that does not overlap the video is a failed sample.

Torch is imported inside the functions that need it.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from videorl.backend import PromptInput
from videorl.errors import DataError

if TYPE_CHECKING:
    import torch

    from videorl.backend import ModelBackend
    from videorl.benchmark import Benchmark, BenchmarkRow
    from videorl.media import DecodeParams, ImageParams, MediaCache, VideoMetadata

__all__ = ["CLIP_POLICY", "RowInputs", "clip_frames"]

#: How clip bounds are applied (written into every run's settings).
CLIP_POLICY = (
    "frames sampled over the whole video at the run's fps and frame cap (one cache entry per video), "
    "then those with timestamps inside the clip, evenly thinned to a multiple of the temporal patch "
    "size; when fewer than one temporal patch fall inside, the nearest frames"
)


def clip_frames(
    frames: torch.Tensor, meta: VideoMetadata, clip: tuple[float, float], temporal_patch_size: int
) -> tuple[torch.Tensor, VideoMetadata]:
    """The frames of ``frames`` that lie in ``clip`` (seconds), with metadata describing them.

    Keeps the sampled frames whose timestamps are in ``[start, end]``, thinned evenly to a multiple
    of ``temporal_patch_size``; when fewer than one temporal patch lie inside, the
    ``temporal_patch_size`` frames nearest to the clip. The metadata keeps the source indices and
    timestamps of the kept frames; its ``duration`` becomes the clip's length within the video (so
    the sampled rate, and Qwen2.5-VL's seconds per temporal patch, describe the kept frames), and
    ``extra["clip"]`` records the bounds. Raises :class:`DataError` when the clip misses the video.
    """
    import numpy as np

    start, end = float(clip[0]), float(clip[1])
    if end <= 0 or start >= meta.duration:
        raise DataError(
            f"clip [{start:g}, {end:g}] s lies outside the video ({meta.duration:g} s long): the "
            "annotation does not belong to this video file"
        )
    times = np.asarray(meta.timestamps, dtype=np.float64)
    inside = np.flatnonzero((times >= start) & (times <= end))
    tps = temporal_patch_size
    if inside.size >= tps:
        keep = (inside.size // tps) * tps
        picked = inside[np.round(np.linspace(0, inside.size - 1, keep)).astype(np.int64)]
    else:
        distance = np.maximum(np.maximum(start - times, times - end), 0.0)
        picked = np.sort(np.argsort(distance, kind="stable")[: min(tps, times.size)])
    span = min(end, meta.duration) - max(start, 0.0)
    kept = replace(
        meta,
        frame_indices=tuple(meta.frame_indices[i] for i in picked),
        timestamps=tuple(meta.timestamps[i] for i in picked),
        duration=span,
        extra={**meta.extra, "clip": [start, end]},
    )
    if picked.size == frames.shape[0]:
        return frames, kept
    return frames[picked.tolist()], kept


class RowInputs:
    """Builds the :class:`PromptInput` of a benchmark row: media from the cache, the adapter's prompt.

    Thread-safe: the evaluator's loader threads share one instance. Two rows asking for the same video
    at once decode it once (a lock per source file); later rows map the cached entry.
    """

    def __init__(
        self,
        backend: ModelBackend,
        cache: MediaCache,
        video: DecodeParams,
        image: ImageParams,
        *,
        thinking: bool = False,
        system: str | None = None,
    ) -> None:
        self.backend = backend
        self.cache = cache
        self.video_params = video
        self.image_params = image
        self.thinking = thinking
        self.system = system
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def _lock(self, source: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(source, threading.Lock())

    def video(self, path: str, clip: tuple[float, float] | None = None) -> tuple[torch.Tensor, VideoMetadata]:
        """uint8 ``T×3×H×W`` frames and metadata of ``path`` (from the cache, built on first use)."""
        source = os.path.abspath(path)
        if Path(source).is_dir():
            raise DataError(
                f"{source}: a folder of frames; the data path decodes video files only (convert the "
                "frames to a video, e.g. with ffmpeg -framerate FPS -i %05d.jpg clip.mp4)"
            )
        if self.cache.mode == "prefer_preprocessed":
            with self._lock(source):
                ref = self.cache.get_or_build(source, self.video_params)
            frames, meta = self.cache.load(ref, self.video_params)
        else:
            frames, meta = self.cache.load(source, self.video_params)
        if clip is not None:
            frames, meta = clip_frames(frames, meta, clip, self.backend.temporal_patch_size)
        return frames, meta

    def image(self, path: str) -> torch.Tensor:
        """uint8 ``3×H×W`` pixels of the image at ``path``, resized to the image budget."""
        import torch

        from videorl.media import decode_image

        pixels, _ = decode_image(path, self.image_params)
        return torch.from_numpy(pixels)

    def text(self, benchmark: Benchmark, row: BenchmarkRow) -> str:
        return benchmark.build_prompt(row, family=self.backend.family, thinking=self.thinking)

    def prompt(self, benchmark: Benchmark, row: BenchmarkRow, sample_id: str | None = None) -> PromptInput:
        """The row's prompt with its media; a missing or unreadable file raises (the sample fails)."""
        videos = [self.video(row.video, row.clip)] if row.video else []
        images = [self.image(row.image)] if row.image else []
        return PromptInput(
            sample_id=sample_id or row.id,
            text=self.text(benchmark, row),
            videos=videos,
            images=images,
            system=self.system,
        )
