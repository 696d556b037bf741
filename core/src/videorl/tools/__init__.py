"""Tools a policy calls during a rollout (a plugin kind, ``register_tools``): what a tool is, how its
arguments are checked, how a call is read from generated text, and the built-in video tools."""

from videorl.tools.base import (
    Tool,
    ToolArgumentError,
    ToolContext,
    ToolResult,
    VideoSource,
    check_arguments,
    check_tool_schema,
    run_tool,
    tool_spec,
)
from videorl.tools.calls import ToolCall, ToolCallRecord, parse_tool_call

__all__ = [
    "Tool",
    "ToolArgumentError",
    "ToolCall",
    "ToolCallRecord",
    "ToolContext",
    "ToolResult",
    "VideoSource",
    "check_arguments",
    "check_tool_schema",
    "parse_tool_call",
    "run_tool",
    "tool_spec",
]
