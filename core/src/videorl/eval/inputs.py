"""What the evaluator gives the model for one benchmark row: cached frames (of its clip), image, prompt.

Videos go through the frame cache (:class:`videorl.media.MediaCache`), built on first use, so a
benchmark evaluated twice, or by several checkpoints sharing a cache, is decoded once. Images are
decoded on the fly to their own budget (they are cheap and the cache holds videos only).

Clip bounds (``row.clip``) become the decoding parameters' time range (``DecodeParams.start``/``end``),
so a clip is sampled as a video of its own length would be, in a cache entry of its own — see
:data:`CLIP_POLICY`. A clip that starts past the end of the video is a failed sample.

Torch is imported inside the functions that need it.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.backend import PromptInput
from videorl.errors import DataError

if TYPE_CHECKING:
    import torch

    from videorl.backend import ModelBackend
    from videorl.benchmark import Benchmark, BenchmarkRow
    from videorl.media import DecodeParams, ImageParams, MediaCache, VideoMetadata

__all__ = ["CLIP_POLICY", "RowInputs", "visual_params"]

#: How clip bounds are applied (written into every run's settings).
CLIP_POLICY = (
    "frames sampled within the clip at the run's fps and frame cap, the count from the clip's duration "
    "(one cache entry per video and clip); the metadata's duration is the clip's length within the video"
)


def visual_params(backend: ModelBackend, **video: Any) -> tuple[DecodeParams, ImageParams]:
    """Evaluation's video and image budgets: the model family's (``backend.budget``, which training
    uses for every ``data.video_*``/``data.image_*`` key left null, so one frame cache serves both),
    with the video settings given (``fps``, ``max_frames``, ``min_pixels``, ``max_pixels``,
    ``total_pixels``)."""
    from videorl.media import DecodeParams, ImageParams

    video_params = DecodeParams.from_budget(
        backend.budget, factor=backend.factor, temporal_patch_size=backend.temporal_patch_size, **video
    )
    return video_params, ImageParams.from_budget(backend.budget, factor=backend.factor)


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
        """uint8 ``T×3×H×W`` frames and metadata of ``path`` (from the cache, built on first use); with
        ``clip`` (start and end second) only that time range is sampled."""
        source = os.path.abspath(path)
        if Path(source).is_dir():
            raise DataError(
                f"{source}: a folder of frames; the data path decodes video files only (convert the "
                "frames to a video, e.g. with ffmpeg -framerate FPS -i %05d.jpg clip.mp4)"
            )
        params = self.video_params if clip is None else replace(self.video_params, start=clip[0], end=clip[1])
        if self.cache.mode == "prefer_preprocessed":
            with self._lock(source):
                ref = self.cache.get_or_build(source, params)
            return self.cache.load(ref, params)
        return self.cache.load(source, params)

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
