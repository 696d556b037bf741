"""``VideoMetadata``: what was decoded, from where, and how; it travels with every set of frames."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class VideoMetadata:
    """How a ``T×3×H×W`` uint8 frame tensor was produced from its source video.

    ``frame_indices`` are the indices of the sampled frames in the source video and ``timestamps``
    their times in seconds; ``width``/``height`` are the resized size of the frames, and
    ``source_width``/``source_height`` the size of the source (after applying its rotation).
    ``duration`` is the time the frames cover: the video's length, or for a time range
    (``DecodeParams.start``/``end``) the range's length within the video, which ``extra["clip"]`` holds.
    """

    source_fps: float
    total_frames: int
    duration: float
    frame_indices: tuple[int, ...]
    timestamps: tuple[float, ...]
    source_width: int
    source_height: int
    width: int
    height: int
    decoder: str = "pyav"
    decoder_version: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def num_frames(self) -> int:
        return len(self.frame_indices)

    @property
    def sampled_fps(self) -> float:
        """The effective rate of the sampled frames (frames per second of source time)."""
        if self.num_frames < 2 or self.duration <= 0:
            return self.source_fps
        return self.num_frames / self.duration

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["frame_indices"] = list(self.frame_indices)
        d["timestamps"] = list(self.timestamps)
        return d

    @classmethod
    def every_frame(cls, frames: int, height: int, width: int, fps: float = 2.0) -> VideoMetadata:
        """All ``frames`` frames of a ``height×width`` source at ``fps``, kept at their size (synthetic
        frames in tests and benchmarks)."""
        return cls(
            source_fps=fps,
            total_frames=frames,
            duration=frames / fps,
            frame_indices=tuple(range(frames)),
            timestamps=tuple(i / fps for i in range(frames)),
            source_width=width,
            source_height=height,
            width=width,
            height=height,
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VideoMetadata:
        d = dict(d)
        d["frame_indices"] = tuple(int(i) for i in d["frame_indices"])
        d["timestamps"] = tuple(float(t) for t in d["timestamps"])
        return cls(**d)

    def to_hf_dict(self) -> dict[str, Any]:
        """The fields of ``transformers.video_utils.VideoMetadata`` (and of vLLM's video metadata).

        transformers takes the frames' rate as ``frames / total_num_frames * fps`` (Qwen2.5-VL's
        ``second_per_grid_ts`` comes from it), which assumes the frames span the whole video. For a time
        range or a tool's segment ``total_num_frames`` is therefore the source frames the range
        covers, so that rate is :attr:`sampled_fps`; frame indices stay the video's own, so
        timestamps (Qwen3-VL's) are the times in the video.
        """
        partial = "clip" in self.extra or "segment" in self.extra
        covered = max(self.num_frames, round(self.duration * self.source_fps))
        return {
            "total_num_frames": covered if partial else self.total_frames,
            "fps": self.source_fps,
            "frames_indices": list(self.frame_indices),
            "duration": self.duration,
            "width": self.width,
            "height": self.height,
            "video_backend": self.decoder,
        }


@dataclass(frozen=True)
class ImageMetadata:
    """How a ``3×H×W`` uint8 image tensor was produced from its source file."""

    source_width: int
    source_height: int
    width: int
    height: int
    decoder: str = "pyav"
    decoder_version: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
