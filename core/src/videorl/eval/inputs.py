"""What the evaluator gives the model for one benchmark row: cached frames (of its clip), image, prompt.

Media come from :class:`videorl.media.loader.MediaLoader`, the loader training's encoder uses: videos
through the frame cache, built on first use, so a benchmark evaluated twice, or by several checkpoints
sharing a cache, is decoded once; images decoded on the fly to their own budget.

Clip bounds (``row.clip``) become the decoding parameters' time range (``DecodeParams.start``/``end``),
so a clip is sampled as a video of its own length would be, in a cache entry of its own — see
:data:`CLIP_POLICY`. A clip that starts past the end of the video is a failed sample.

Torch is imported inside the functions that need it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from videorl.backend import PromptInput
from videorl.media.loader import MediaLoader

if TYPE_CHECKING:
    import torch

    from videorl.backend import ModelBackend, VisualBudget
    from videorl.benchmark import Benchmark, BenchmarkRow
    from videorl.media import DecodeParams, ImageParams, MediaCache, VideoMetadata

__all__ = ["CLIP_POLICY", "RowInputs", "visual_params"]

#: How clip bounds are applied (written into every run's settings).
CLIP_POLICY = (
    "frames sampled within the clip at the run's fps and frame cap, the count from the clip's duration "
    "(one cache entry per video and clip); the metadata's duration is the clip's length within the video"
)


def visual_params(
    backend: ModelBackend, budget: VisualBudget | None = None
) -> tuple[DecodeParams, ImageParams]:
    """Evaluation's video and image parameters: ``budget`` (the eval config's ``data.*`` keys over the
    family's, :meth:`~videorl.eval.config.EvalDataConfig.visual_budget`), by default the model family's
    (``backend.budget``, which training uses for every ``data.video_*``/``data.image_*`` key left null,
    so one frame cache serves both), at the backend's geometry."""
    from videorl.media import DecodeParams, ImageParams

    budget = budget or backend.budget
    video = DecodeParams.from_budget(
        budget, factor=backend.factor, temporal_patch_size=backend.temporal_patch_size
    )
    return video, ImageParams.from_budget(budget, factor=backend.factor)


class RowInputs:
    """Builds the :class:`PromptInput` of a benchmark row: media from the :class:`MediaLoader` (the one
    training's encoder uses), the adapter's prompt.

    Thread-safe: the evaluator's loader threads share one instance (the loader decodes a video asked
    for by two rows at once once).
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
        self.media = MediaLoader(cache, video, image)
        self.thinking = thinking
        self.system = system

    def video(self, path: str, clip: tuple[float, float] | None = None) -> tuple[torch.Tensor, VideoMetadata]:
        """uint8 ``T×3×H×W`` frames and metadata of ``path``; with ``clip`` only that time range."""
        return self.media.video(path, clip)

    def image(self, path: str) -> torch.Tensor:
        """uint8 ``3×H×W`` pixels of the image at ``path``, resized to the image budget."""
        return self.media.image(path)

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
