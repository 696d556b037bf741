"""The one media loader: a sample's videos and images as the model sees them, for training and evaluation.

Videos come from the frame cache (:class:`~videorl.media.MediaCache`, built on first use in
``prefer_preprocessed`` mode, decoded on the fly in ``realtime_only``) at the run's decoding parameters;
a clip (start and end second) becomes the parameters' time range, so it is sampled as a video of its
own length, in a cache entry of its own. Images are decoded on the fly to their own budget (they are
cheap and the cache holds videos only).

Thread-safe: two threads asking for the same video at once decode it once (a lock per source file);
later calls map the cached entry. Torch is imported inside the functions that need it.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from videorl.errors import DataError
from videorl.media.params import DecodeParams, ImageParams, PatchGeometry, VisualBudget

if TYPE_CHECKING:
    import torch

    from videorl.media.cache import MediaCache
    from videorl.media.metadata import VideoMetadata

__all__ = ["MediaLoader"]


class MediaLoader:
    """Frames and pixels of media files at one video and one image budget (``video``, ``image``)."""

    def __init__(self, cache: MediaCache, video: DecodeParams, image: ImageParams) -> None:
        self.cache = cache
        self.video_params = video
        self.image_params = image
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    @classmethod
    def for_budget(cls, cache: MediaCache, budget: VisualBudget, backend: PatchGeometry) -> MediaLoader:
        """The loader of ``budget`` at ``backend``'s geometry (its ``factor`` and temporal patch)."""
        video = DecodeParams.from_budget(
            budget, factor=backend.factor, temporal_patch_size=backend.temporal_patch_size
        )
        return cls(cache, video, ImageParams.from_budget(budget, factor=backend.factor))

    def _lock(self, source: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(source, threading.Lock())

    def video(self, path: str, clip: tuple[float, float] | None = None) -> tuple[torch.Tensor, VideoMetadata]:
        """uint8 ``T×3×H×W`` frames and metadata of ``path``; with ``clip`` (start and end second) only
        that time range is sampled."""
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

        from videorl.media.decode import decode_image

        pixels, _ = decode_image(path, self.image_params)
        return torch.from_numpy(pixels)
