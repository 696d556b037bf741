"""Prompt-length filtering that counts visual tokens from the grids, before any pixel is processed.

A prompt is never cut: one longer than the limit is reported (sample id, tokens, limit) and skipped
or, if so configured, the whole call fails with :class:`~videorl.errors.DataError`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from videorl.errors import ConfigError, DataError

__all__ = ["OverlongPrompt", "filter_overlong"]

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OverlongPrompt:
    """A prompt left out because it does not fit."""

    sample_id: str
    tokens: int
    limit: int

    def __str__(self) -> str:
        return f"sample {self.sample_id!r}: {self.tokens} prompt tokens > limit {self.limit}"


def filter_overlong(
    items: Sequence[T],
    *,
    length: Callable[[T], int],
    sample_id: Callable[[T], str],
    limit: int,
    on_overflow: Literal["skip", "fail"] = "skip",
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
            dropped.append(OverlongPrompt(sample_id(item), tokens, limit))
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
