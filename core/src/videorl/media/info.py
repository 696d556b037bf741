"""What a reward or an answer reader knows of a prompt's media."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from videorl.media import VideoMetadata


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
    def from_metadata(cls, meta: VideoMetadata) -> MediaInfo:
        """From the metadata of the frames the model saw (the one mapping; :meth:`from_dict` reads
        its dict)."""
        return cls.from_dict(meta.to_dict())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MediaInfo:
        """From ``MediaInfo`` fields, or from a ``VideoMetadata.to_dict()`` (``source_fps``,
        ``source_width``, ...)."""
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
