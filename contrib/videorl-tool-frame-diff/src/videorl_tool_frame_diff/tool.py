"""``frame_diff``: how much the picture changes between two times of the sample's video."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from videorl.api import ToolArgumentError, ToolContext, ToolResult


class FrameDiff:
    """The mean absolute pixel difference (0-255) of the cached frames nearest two times: a text
    reply, no media, so it costs the policy a few tokens where ``get_frames`` costs a video."""

    name = "frame_diff"
    description = (
        "How much the video changes between times t0 and t1 (seconds): 0 (the same picture) to 255. "
        "Use it to find when something happens, then look with get_frames."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "t0": {"type": "number", "minimum": 0},
            "t1": {"type": "number", "minimum": 0},
        },
        "required": ["t0", "t1"],
    }

    def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        video = context.video
        if video is None:
            raise ToolArgumentError("this sample has no video")
        t0, t1 = float(arguments["t0"]), float(arguments["t1"])
        if max(t0, t1) > video.duration:
            raise ToolArgumentError(f"times must lie within the video (0 to {video.duration:.2f} s)")
        (a, shown0), (b, shown1) = video.frame(t0), video.frame(t1)
        change = float((a.float() - b.float()).abs().mean())
        return ToolResult(f"Change between {shown0:.2f} s and {shown1:.2f} s: {change:.1f}")
