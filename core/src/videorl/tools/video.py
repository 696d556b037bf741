"""The built-in video tools over the sample's cached frames: ``get_frames`` (a segment of ``n`` frames
between two times, returned as a video with its real frame indices and times, so the model's temporal
positions and Qwen3-VL's timestamp tokens are those of the source), ``seek`` (one frame) and ``zoom``
(a region of one frame at a higher pixel budget, as an image).

:class:`FrameSource` serves them from the frames the prompt's video was decoded to (the frame cache's
entry and its :class:`~videorl.media.VideoMetadata`): a segment holds the cached frames inside the
window, never more detail than the entry holds; :class:`WindowSource` decodes each window asked for
afresh (``rollout.tool_frames: decode``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from videorl.errors import DataError
from videorl.media.sizing import fit_to_budget
from videorl.tools.base import ToolArgumentError, ToolContext, ToolResult

if TYPE_CHECKING:
    import torch

    from videorl.media import VideoMetadata

#: how far past the video's end (seconds) a time may lie and still mean its end (rounding in the text)
TIME_SLACK = 0.05


class FrameSource:
    """A decoded video (uint8 ``T×3×H×W`` with its metadata) as tools read it; segments hold a
    multiple of ``temporal_patch`` frames (the last repeated where the window holds fewer)."""

    def __init__(self, frames: torch.Tensor, meta: VideoMetadata, temporal_patch: int = 2) -> None:
        if frames.ndim != 4 or frames.shape[0] != meta.num_frames or meta.num_frames < 1:
            raise ValueError(
                f"frame source: {tuple(frames.shape)} frames for {meta.num_frames} in the metadata"
            )
        self.frames, self.meta, self.temporal_patch = frames, meta, max(1, temporal_patch)

    @property
    def duration(self) -> float:
        return max(self.meta.duration, self.meta.timestamps[-1])

    def segment(self, start: float, end: float, n: int) -> tuple[torch.Tensor, VideoMetadata]:
        """Up to ``n`` cached frames shown in ``[start, end]``, evenly spread (the frame nearest the
        window's middle when none lies inside), with their source indices and times."""
        times = self.meta.timestamps
        inside = [i for i, t in enumerate(times) if start <= t <= end]
        if not inside:
            middle = (start + end) / 2
            inside = [min(range(len(times)), key=lambda i: abs(times[i] - middle))]
        if len(inside) > n:
            step = (len(inside) - 1) / max(n - 1, 1)
            inside = [inside[round(k * step)] for k in range(n)] if n > 1 else [inside[len(inside) // 2]]
        chosen = inside + [inside[-1]] * (-len(inside) % self.temporal_patch)
        return self.frames[chosen], self._metadata(chosen)

    def _metadata(self, chosen: list[int]) -> VideoMetadata:
        """The metadata of frames ``chosen`` (positions in this source): their source indices and times,
        and a duration whose rate (frames / duration) is the spacing of the chosen frames."""
        times = [self.meta.timestamps[i] for i in chosen]
        distinct = sorted(set(times))
        if len(distinct) > 1:
            spacing = (distinct[-1] - distinct[0]) / (len(distinct) - 1)
        else:
            spacing = 1.0 / self.meta.source_fps
        return dataclasses.replace(
            self.meta,
            frame_indices=tuple(self.meta.frame_indices[i] for i in chosen),
            timestamps=tuple(times),
            duration=spacing * len(chosen),
            extra={**self.meta.extra, "segment": (times[0], times[-1])},
        )

    def frame(self, t: float) -> tuple[torch.Tensor, float]:
        """The cached frame nearest ``t`` (``3×H×W``) and its time."""
        times = self.meta.timestamps
        i = min(range(len(times)), key=lambda k: abs(times[k] - t))
        return self.frames[i], times[i]


class WindowSource(FrameSource):
    """A video whose segments are decoded afresh, window by window: ``load(start, end)`` returns the
    frames of that window (at the run's budget, cached like any entry), so a segment may show what the
    prompt's frames missed; single frames (``seek``, ``zoom``) and the duration are the prompt's."""

    def __init__(
        self,
        frames: torch.Tensor,
        meta: VideoMetadata,
        load: Callable[[float, float], tuple[torch.Tensor, VideoMetadata]],
        temporal_patch: int = 2,
    ) -> None:
        super().__init__(frames, meta, temporal_patch)
        self.load = load

    def segment(self, start: float, end: float, n: int) -> tuple[torch.Tensor, VideoMetadata]:
        """Up to ``n`` frames of the window ``[start, end]`` as decoded for it (:meth:`FrameSource.segment`
        over them)."""
        return FrameSource(*self.load(start, end), self.temporal_patch).segment(start, end, n)


def _video(context: ToolContext) -> Any:
    if context.video is None:
        raise ToolArgumentError("this sample has no video to look at")
    return context.video


def _time(context: ToolContext, key: str, value: float) -> float:
    """``value`` as a time of the video (seconds), refused outside ``[0, duration]``."""
    duration = _video(context).duration
    if not 0 <= value <= duration + TIME_SLACK:
        raise ToolArgumentError(f"{key} = {value:g} s is outside the video (0 to {duration:.2f} s)")
    return min(float(value), duration)


class GetFrames:
    """``get_frames(start, end, n)``: ``n`` frames between two times, as a video segment."""

    name = "get_frames"
    description = "Return n frames of the video between start and end (seconds), as a video clip."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "start": {"type": "number", "minimum": 0, "description": "start time in seconds"},
            "end": {"type": "number", "minimum": 0, "description": "end time in seconds"},
            "n": {"type": "integer", "minimum": 1, "maximum": 256, "description": "number of frames"},
        },
        "required": ["start", "end", "n"],
    }

    def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        start = _time(context, "start", arguments["start"])
        end = _time(context, "end", arguments["end"])
        n = int(arguments["n"])
        if end <= start:
            raise ToolArgumentError(f"end ({end:g} s) must come after start ({start:g} s)")
        if n > context.max_frames:
            raise ToolArgumentError(
                f"n = {n} is more than the {context.max_frames} frames one call may return"
            )
        frames, meta = _video(context).segment(start, end, n)
        first, last = meta.timestamps[0], meta.timestamps[-1]
        return ToolResult(
            f"{meta.num_frames} frames from {first:.2f} s to {last:.2f} s:", videos=[(frames, meta)]
        )


class Seek:
    """``seek(t)``: the frame shown at time ``t``, as an image."""

    name = "seek"
    description = "Return the frame of the video at time t (seconds), as an image."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"t": {"type": "number", "minimum": 0, "description": "time in seconds"}},
        "required": ["t"],
    }

    def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        frame, shown = _video(context).frame(_time(context, "t", arguments["t"]))
        return ToolResult(f"The frame at {shown:.2f} s:", images=[frame])


class Zoom:
    """``zoom(t, box)``: a region of the frame at time ``t`` (``box`` = ``[x1, y1, x2, y2]`` as fractions
    of its width and height), enlarged to the zoom pixel budget, as an image."""

    name = "zoom"
    description = (
        "Return a region of the frame at time t (seconds), enlarged; box = [x1, y1, x2, y2] as fractions "
        "(0 to 1) of the frame's width and height."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "t": {"type": "number", "minimum": 0, "description": "time in seconds"},
            "box": {
                "type": "array",
                "items": {"type": "number", "minimum": 0, "maximum": 1},
                "minItems": 4,
                "maxItems": 4,
            },
        },
        "required": ["t", "box"],
    }

    def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        import torch

        frame, shown = _video(context).frame(_time(context, "t", arguments["t"]))
        x1, y1, x2, y2 = (float(v) for v in arguments["box"])
        if x2 <= x1 or y2 <= y1:
            raise ToolArgumentError(f"box {[x1, y1, x2, y2]} must have x1 < x2 and y1 < y2")
        _, height, width = frame.shape
        top, left = math.floor(y1 * height), math.floor(x1 * width)
        bottom, right = max(math.ceil(y2 * height), top + 1), max(math.ceil(x2 * width), left + 1)
        region = frame[:, top:bottom, left:right]
        h, w = _zoomed_size(region.shape[1], region.shape[2], context)
        image = torch.nn.functional.interpolate(
            region[None].float(), size=(h, w), mode="bilinear", align_corners=False, antialias=True
        )[0]
        return ToolResult(
            f"The region {[round(v, 3) for v in (x1, y1, x2, y2)]} of the frame at {shown:.2f} s:",
            images=[image.round().clamp(0, 255).to(torch.uint8)],
        )


def _zoomed_size(height: int, width: int, context: ToolContext) -> tuple[int, int]:
    """A region's enlarged size: the zoom budget's area at the region's aspect ratio, sides multiples of
    the factor (a region too thin for the ratio limit is refused)."""
    f = context.factor
    scale = math.sqrt(context.zoom_max_pixels / (height * width))
    try:
        return fit_to_budget(
            max(1, round(height * scale)), max(1, round(width * scale)),
            factor=f, min_pixels=4 * f * f, max_pixels=context.zoom_max_pixels,
        )  # fmt: skip
    except DataError as exc:
        raise ToolArgumentError(f"box: {exc}") from None
