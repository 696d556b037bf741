"""What a reward receives and returns."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from videorl.data.loaders import parse_row
from videorl.data.sample import GROUND_TRUTH_KEYS, Sample
from videorl.media.info import MediaInfo
from videorl.tools.calls import ToolCallRecord

_MEDIA_KEYS = ("media", "video_metadata")
#: fields of a row that are not the sample's own (``videorl reward`` lines carry their responses)
_NOT_EXTRA = {*_MEDIA_KEYS, "model_family", "response", "responses"}


@dataclass
class RewardInput:
    """One response to score, with the sample it answers.

    ``ground_truth`` is the sample's answer as stored (a string, possibly wrapped in ``<answer>…</answer>``,
    or already parsed JSON); each reward parses it for its type. ``extra`` holds the sample's remaining
    fields (e.g. ``tests`` for code). ``response`` is the final answer (the episode's last turn);
    ``tool_calls`` are the calls a tool-using episode made before it, in order (empty for a single
    turn), for a reward that scores the search itself (which windows it asked for, how many calls).
    """

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
    tool_calls: tuple[ToolCallRecord, ...] = ()

    @classmethod
    def from_sample(
        cls,
        sample: Sample | Mapping[str, Any],
        response: str,
        *,
        media: MediaInfo | None = None,
        model_family: str | None = None,
        where: str = "sample",
        tool_calls: Sequence[ToolCallRecord] = (),
    ) -> RewardInput:
        """The input for ``response`` to ``sample``: the one mapping from a sample to what a reward sees.

        A mapping (a dataset row, a ``videorl reward`` line) is read by the one row parser,
        :func:`videorl.data.loaders.parse_row` (``where`` names it in a ``DataError``), the question and
        the media files optional. ``media`` defaults to the row's ``media`` (``MediaInfo`` fields) or
        ``video_metadata`` (a ``VideoMetadata`` dict). A missing ``problem_type`` or ground truth raises
        ``KeyError`` naming the field (a row with ``tests`` needs no ground truth). ``tool_calls``: the
        episode's calls.
        """
        if not isinstance(sample, Sample):
            sample = parse_row(
                dict(sample), where, media_root=Path(), default_id="", require_answer=False, scoring=True
            )
        if not sample.problem_type:
            raise KeyError("problem_type")
        if sample.ground_truth is None and not sample.extra.get("tests"):  # code rows: only their tests
            raise KeyError(" or ".join(GROUND_TRUTH_KEYS))
        if media is None:
            given = next((sample.extra[k] for k in _MEDIA_KEYS if sample.extra.get(k) is not None), None)
            if given is not None and not isinstance(given, Mapping):
                raise ValueError(f"media must map MediaInfo or VideoMetadata fields, got {given!r:.30}")
            media = MediaInfo.from_dict(given) if given is not None else None
        return cls(
            response=response,
            problem_type=sample.problem_type,
            ground_truth=sample.ground_truth,
            problem=sample.problem,
            data_type=sample.data_type,
            options=sample.options,
            media=media,
            sample_id=sample.id,
            model_family=model_family or sample.extra.get("model_family"),
            extra={k: v for k, v in sample.extra.items() if k not in _NOT_EXTRA},
            tool_calls=tuple(tool_calls),
        )


@dataclass
class RewardOutput:
    """A score in [0, 1] and its named parts (accuracy, format, ...) for logging.

    ``error`` is set by the router, never by a reward: the reason a sample scored 0 because its reward
    raised, timed out or returned an invalid value.
    """

    score: float
    parts: dict[str, float] = field(default_factory=dict)
    error: str | None = None


@runtime_checkable
class Reward(Protocol):
    """A reward: called with one input, returns an output, or ``None`` to abstain.

    ``__call__`` may be ``async``. A reward that can score many inputs at once more cheaply may also
    define ``score_batch(inputs) -> list[RewardOutput | None]``.
    """

    def __call__(self, inp: RewardInput) -> RewardOutput | Awaitable[RewardOutput | None] | None: ...
