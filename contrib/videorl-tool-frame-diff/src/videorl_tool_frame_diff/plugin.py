"""Hook implementation of videorl-tool-frame-diff: the ``frame_diff`` tool."""

from __future__ import annotations

from videorl.api import Register, hookimpl


@hookimpl
def register_tools(register: Register) -> None:
    # a lazy target: the tool's module is imported when a run asks for the tool, not on listing
    register(
        "frame_diff",
        "videorl_tool_frame_diff.tool:FrameDiff",
        description="how much the video changes between two times (0-255)",
    )
