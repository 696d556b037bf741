"""What a reward receives and returns."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class MediaInfo:
    """What a reward may need to know about the sample's media (from its ``VideoMetadata``)."""

    duration: float | None = None
    fps: float | None = None
    num_frames: int | None = None
    width: int | None = None
    height: int | None = None
    resized_width: int | None = None
    resized_height: int | None = None


@dataclass
class RewardInput:
    """One response to score, with the sample it answers."""

    response: str
    problem_type: str
    ground_truth: Any
    problem: str = ""
    data_type: str = "video"
    options: list[str] | None = None
    media: MediaInfo | None = None
    sample_id: str = ""
    model_family: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RewardOutput:
    """A score in [0, 1] and its named parts (accuracy, format, ...) for logging."""

    score: float
    parts: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class Reward(Protocol):
    """A reward: called with one input, returns an output, or ``None`` to abstain.

    ``__call__`` may be ``async``. A reward that can score many inputs at once more cheaply may also
    define ``score_batch(inputs) -> list[RewardOutput | None]``.
    """

    def __call__(
        self, inp: RewardInput
    ) -> RewardOutput | None | Awaitable[RewardOutput | None]: ...
