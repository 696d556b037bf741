"""The contract check of a tool plugin: :func:`assert_tool_contract`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from videorl.tools import Tool, ToolContext, ToolResult, check_tool_schema, run_tool
from videorl.tools.video import TIME_SLACK

#: the most characters of a tool's text reply the contract accepts (it becomes prompt tokens)
MAX_TEXT = 4096

#: values of the wrong kind for any argument: every one must be refused, not raise
HOSTILE_VALUES: tuple[Any, ...] = (
    None, True, 0, "1", [], {}, math.nan, math.inf, -math.inf, -1e308, 1e308, [1.0] * 100, "x" * 5000,
)  # fmt: skip


def _check_times(where: str, meta: Any, context: ToolContext) -> None:
    """A returned video's metadata holds the real times of its frames: one finite, non-decreasing time
    and source index per frame, inside the sample's video (with the tools' rounding slack)."""
    times, indices = list(meta.timestamps), list(meta.frame_indices)
    assert len(times) == len(indices) == meta.num_frames, (
        f"{where}: {len(times)} times and {len(indices)} frame indices for {meta.num_frames} frames"
    )
    assert all(isinstance(t, (int, float)) and math.isfinite(t) and t >= 0 for t in times), (
        f"{where}: frame times must be finite seconds >= 0, got {times[:8]}"
    )
    assert times == sorted(times), f"{where}: frame times must not decrease, got {times[:8]}"
    assert all(isinstance(i, int) and i >= 0 for i in indices), f"{where}: frame indices {indices[:8]}"
    if context.video is not None and times:
        end = context.video.duration + TIME_SLACK
        assert times[-1] <= end, f"{where}: a frame at {times[-1]} s lies past the video's end ({end} s)"


def _check_result(tool: Tool, result: Any, context: ToolContext, what: str) -> None:
    import torch

    where = f"{tool.name}{what}"
    assert isinstance(result, ToolResult), f"{where}: call returned {type(result).__name__}"
    assert isinstance(result.text, str), f"{where}: text must be a string"
    assert len(result.text) <= MAX_TEXT, f"{where}: {len(result.text)} characters of text (most {MAX_TEXT})"
    for frames, meta in result.videos:
        assert frames.dtype == torch.uint8 and frames.ndim == 4, f"{where}: video must be uint8 T×3×H×W"
        assert meta.num_frames == frames.shape[0], f"{where}: metadata lists {meta.num_frames} frames"
        _check_times(where, meta, context)
    for image in result.images:
        assert image.dtype == torch.uint8 and image.ndim == 3, f"{where}: image must be uint8 3×H×W"
    assert result.frames <= context.max_frames, (
        f"{where}: {result.frames} frames returned, more than context.max_frames ({context.max_frames})"
    )
    for shape in [f.shape[-2:] for f, _ in result.videos] + [i.shape[-2:] for i in result.images]:
        assert all(s % context.factor == 0 for s in shape), (
            f"{where}: a frame of {tuple(shape)} is not a multiple of the factor {context.factor}"
        )
        assert shape[0] * shape[1] <= context.zoom_max_pixels, (
            f"{where}: a frame of {tuple(shape)} is over context.zoom_max_pixels ({context.zoom_max_pixels})"
        )


def assert_tool_contract(
    tool: Tool, context: ToolContext, valid: Sequence[Mapping[str, Any]] = ()
) -> list[ToolResult]:
    """Check ``tool``: its name (an identifier), description and JSON schema (what the workflow can
    check); each call of ``valid`` arguments returns a well-formed result: text of at most
    :data:`MAX_TEXT` characters, media uint8 with sides multiples of ``context.factor``, at most
    ``context.max_frames`` frames of at most ``context.zoom_max_pixels`` pixels, and every video with
    its real times (one finite, non-decreasing time and source index per frame, inside the sample's
    video); and hostile arguments (missing, unknown, of the wrong type, non-finite, huge) return an
    ``invalid`` result saying why instead of raising. Returns the results of ``valid``."""
    assert isinstance(tool, Tool), f"{tool!r} lacks name, description, parameters or call (videorl.api.Tool)"
    assert isinstance(tool.name, str) and tool.name.isidentifier(), (
        f"tool name {tool.name!r} is not an identifier"
    )
    assert isinstance(tool.description, str) and tool.description, f"tool {tool.name!r} has no description"
    check_tool_schema(tool)
    tools = {tool.name: tool}
    results = []
    for arguments in valid:
        result = run_tool(tools, tool.name, dict(arguments), context)
        assert not result.invalid, f"{tool.name}({dict(arguments)}) was refused: {result.text}"
        _check_result(tool, result, context, f"({dict(arguments)})")
        results.append(result)
    base = dict(valid[0]) if valid else {}
    hostile: list[Any] = [None, [], "args", {"no_such_argument": 1}, {}]
    for key in tool.parameters.get("properties", {}):
        hostile += [{**base, key: value} for value in HOSTILE_VALUES]
    for arguments in hostile:
        try:
            result = run_tool(tools, tool.name, arguments, context)
        except Exception as exc:  # the contract: a bad call is an observation, never an exception
            raise AssertionError(
                f"{tool.name}({arguments!r:.80}) raised {type(exc).__name__}: {exc}"
            ) from exc
        _check_result(tool, result, context, f"({arguments!r:.80})")
        if result.invalid:
            assert result.text, f"{tool.name}({arguments!r:.80}) was refused without saying why"
    return results
