"""What a reward receives and returns."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Protocol, runtime_checkable

#: sample keys that hold the ground truth, in order of preference (EasyVideoR1, Video-R1 schemas)
GROUND_TRUTH_KEYS = ("ground_truth", "answer", "solution")
#: sample keys that hold the sample id, in order of preference
ID_KEYS = ("id", "sample_id", "problem_id")
_MEDIA_KEYS = ("media", "video_metadata")
_KNOWN_KEYS = {
    *GROUND_TRUTH_KEYS, *ID_KEYS, *_MEDIA_KEYS, "problem", "problem_type", "data_type", "options",
    "model_family", "response", "responses",
}  # fmt: skip


@dataclass(frozen=True)
class MediaInfo:
    """What a reward may need to know about the sample's media (from its ``VideoMetadata``).

    ``width``/``height`` are the source frame size; ``resized_width``/``resized_height`` the size of the
    frames the model saw.
    """

    duration: float | None = None
    fps: float | None = None
    num_frames: int | None = None
    width: int | None = None
    height: int | None = None
    resized_width: int | None = None
    resized_height: int | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MediaInfo:
        """From ``MediaInfo`` fields, or from a ``VideoMetadata.to_dict()`` (``source_fps``, ``source_width``, ...)."""
        if "source_width" in data or "source_fps" in data:
            indices = data.get("frame_indices")
            return cls(
                duration=data.get("duration"),
                fps=data.get("source_fps"),
                num_frames=len(indices) if indices is not None else data.get("num_frames"),
                width=data.get("source_width"),
                height=data.get("source_height"),
                resized_width=data.get("width"),
                resized_height=data.get("height"),
            )
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(
                f"unknown media field(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}"
            )
        return cls(**dict(data))


@dataclass
class RewardInput:
    """One response to score, with the sample it answers.

    ``ground_truth`` is the sample's answer as stored (a string, possibly wrapped in ``<answer>…</answer>``,
    or already parsed JSON); each reward parses it for its type. ``extra`` holds the sample's remaining
    fields (e.g. ``tests`` for code).
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

    @classmethod
    def from_sample(
        cls, sample: Mapping[str, Any] | Any, response: str, *, model_family: str | None = None
    ) -> RewardInput:
        """Build the input for ``response`` from a sample (a mapping, or a dataclass/object with fields).

        The ground truth is read from ``ground_truth``, ``answer`` or ``solution``; the id from ``id``,
        ``sample_id`` or ``problem_id``; the media from ``media`` (``MediaInfo`` fields) or
        ``video_metadata`` (a ``VideoMetadata`` dict). A missing ``problem_type`` or ground truth raises
        ``KeyError`` naming the field (a row with ``tests`` needs no ground truth).
        """
        row = _as_mapping(sample)
        if not row.get("problem_type"):
            raise KeyError("problem_type")
        truth_key = next((k for k in GROUND_TRUTH_KEYS if k in row), None)
        if truth_key is None and not row.get("tests"):  # code rows may give only their tests
            raise KeyError(" or ".join(GROUND_TRUTH_KEYS))
        media = next((row[k] for k in _MEDIA_KEYS if row.get(k) is not None), None)
        if media is not None and not isinstance(media, MediaInfo):
            media = MediaInfo.from_dict(_as_mapping(media))
        options = row.get("options")
        return cls(
            response=response,
            problem_type=str(row["problem_type"]),
            ground_truth=row[truth_key] if truth_key else None,
            problem=str(row.get("problem") or ""),
            data_type=str(row.get("data_type") or "video"),
            options=[str(o) for o in options] if options else None,
            media=media,
            sample_id=str(next((row[k] for k in ID_KEYS if row.get(k) is not None), "")),
            model_family=model_family or row.get("model_family"),
            extra={k: v for k, v in row.items() if k not in _KNOWN_KEYS},
        )


def _as_mapping(obj: Any) -> Mapping[str, Any]:
    if isinstance(obj, Mapping):
        return obj
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in fields(obj)}
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    return vars(obj)


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
