"""The contract check of a tool plugin: :func:`assert_tool_contract`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from videorl.tools import Tool, ToolContext, ToolResult, check_tool_schema, run_tool

#: values of the wrong kind for any argument: every one must be refused, not raise
HOSTILE_VALUES: tuple[Any, ...] = (
    None, True, 0, "1", [], {}, math.nan, math.inf, -math.inf, -1e308, 1e308, [1.0] * 100, "x" * 5000,
)  # fmt: skip


def _check_result(tool: Tool, result: Any, context: ToolContext, what: str) -> None:
    import torch

    assert isinstance(result, ToolResult), f"{tool.name}{what}: call returned {type(result).__name__}"
    assert isinstance(result.text, str), f"{tool.name}{what}: text must be a string"
    for frames, meta in result.videos:
        assert frames.dtype == torch.uint8 and frames.ndim == 4, (
            f"{tool.name}{what}: video must be uint8 T×3×H×W"
        )
        assert meta.num_frames == frames.shape[0], (
            f"{tool.name}{what}: metadata lists {meta.num_frames} frames"
        )
    for image in result.images:
        assert image.dtype == torch.uint8 and image.ndim == 3, f"{tool.name}{what}: image must be uint8 3×H×W"
    for shape in [f.shape[-2:] for f, _ in result.videos] + [i.shape[-2:] for i in result.images]:
        assert all(s % context.factor == 0 for s in shape), (
            f"{tool.name}{what}: a frame of {tuple(shape)} is not a multiple of the factor {context.factor}"
        )


def assert_tool_contract(
    tool: Tool, context: ToolContext, valid: Sequence[Mapping[str, Any]] = ()
) -> list[ToolResult]:
    """Check ``tool``: its name, description and schema; each call of ``valid`` arguments returns a
    well-formed result (media uint8, sides multiples of ``context.factor``, metadata matching the
    frames); and hostile arguments (missing, unknown, of the wrong type, non-finite, huge) return an
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
