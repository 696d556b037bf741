"""Prompt-length filtering that counts visual tokens from the grids, before any pixel is processed.

A prompt is never cut: one longer than the limit is reported (sample id, tokens, limit) and skipped
or, if so configured, the whole call fails with :class:`~videorl.errors.DataError`.
:func:`check_cached_prompt_lengths` runs this over a dataset at load time, from the frame cache's
headers alone (no frame is read), so a run does not die mid-step on a prompt that cannot fit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar

from videorl.errors import ConfigError, DataError, VideorlError

if TYPE_CHECKING:
    from videorl.backend import PromptInput
    from videorl.data import Sample
    from videorl.encoding import PromptEncoder

__all__ = ["OverlongPrompt", "check_cached_prompt_lengths", "filter_overlong"]

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OverlongPrompt:
    """A prompt left out because it does not fit."""

    sample_id: str
    tokens: int
    limit: int
    origin: str | None = None  # where the sample is defined (file:line)

    def __str__(self) -> str:
        where = f"{self.origin}: " if self.origin else ""
        return f"{where}sample {self.sample_id!r}: {self.tokens} prompt tokens > limit {self.limit}"


def filter_overlong(
    items: Sequence[T],
    *,
    length: Callable[[T], int],
    sample_id: Callable[[T], str],
    limit: int,
    on_overflow: Literal["skip", "fail"] = "skip",
    origin: Callable[[T], str] | None = None,
) -> tuple[list[T], list[OverlongPrompt]]:
    """Split ``items`` into those whose prompt fits in ``limit`` tokens and reports on the others.

    ``length`` returns the full prompt length including visual tokens (a backend's
    ``prompt_length``). With ``on_overflow="fail"`` any overlong prompt raises ``DataError`` listing
    them all; with ``"skip"`` they are logged and left out.
    """
    if on_overflow not in ("skip", "fail"):
        raise ConfigError(f"on_overflow must be 'skip' or 'fail', got {on_overflow!r}")
    if limit < 1:
        raise ConfigError(f"the prompt-length limit must be positive, got {limit}")
    kept: list[T] = []
    dropped: list[OverlongPrompt] = []
    for item in items:
        tokens = length(item)
        if tokens > limit:
            dropped.append(OverlongPrompt(sample_id(item), tokens, limit, origin(item) if origin else None))
        else:
            kept.append(item)
    if dropped and on_overflow == "fail":
        shown = "; ".join(str(d) for d in dropped[:10])
        raise DataError(
            f"{len(dropped)} prompt(s) exceed the prompt-length limit ({shown}"
            f"{'; ...' if len(dropped) > 10 else ''}). Raise the limit, lower the visual budget "
            "(max pixels / max frames), or set on_overflow='skip'."
        )
    for d in dropped:
        log.warning("skipping %s", d)
    return kept, dropped


def _cached_prompt(sample: Sample, encoder: PromptEncoder) -> PromptInput | None:
    """The sample's prompt with stand-in frames of the cached shapes (zero-size memory: a broadcast
    zero) and the cached metadata: all a backend's ``prompt_length`` reads. None when a video is not
    cached (or the sample has images, whose size is known only once decoded)."""
    import torch

    from videorl.backend import PromptInput
    from videorl.media.cache import read_header

    if sample.images:
        return None
    videos = []
    for path in sample.videos:
        try:
            ref = encoder.media.cache.resolve(path, encoder.media.video_params)
            if ref.key is None or not encoder.media.cache.entry_path(ref.key).is_file():
                return None
            meta = read_header(encoder.media.cache.entry_path(ref.key)).metadata
        except (
            VideorlError,
            OSError,
        ):  # not cached (or unreadable) for these parameters: checked when encoded
            return None
        frames = torch.zeros((), dtype=torch.uint8).expand(meta.num_frames, 3, meta.height, meta.width)
        videos.append((frames, meta))
    return PromptInput(sample.id, encoder.text(sample), videos=videos, images=[], tools=encoder.tools(sample))


def check_cached_prompt_lengths(
    samples: Sequence[Sample], encoder: PromptEncoder, limit: int, where: str
) -> int:
    """Every sample whose videos are all in the frame cache (or that has no media) must fit in
    ``limit`` prompt tokens, counted by the backend's own arithmetic; a :class:`DataError` lists the
    ones that do not, by file and line, with their token counts. Returns how many were checked (the
    others, with images or uncached videos, are checked when encoded)."""
    prompts: list[tuple[Sample, PromptInput]] = []
    for sample in samples:
        prompt = _cached_prompt(sample, encoder)
        if prompt is not None:
            prompts.append((sample, prompt))
    try:
        filter_overlong(
            prompts,
            length=lambda item: encoder.backend.prompt_length(item[1]),
            sample_id=lambda item: item[0].id,
            origin=lambda item: item[0].origin,
            limit=limit,
            on_overflow="fail",
        )
    except DataError as exc:
        raise DataError(
            f"{exc} ({where}; the frames were sampled with fps={encoder.media.video_params.fps}, "
            f"max_frames={encoder.media.video_params.max_frames}, "
            f"max_pixels={encoder.media.video_params.max_pixels})"
        ) from None
    return len(prompts)
