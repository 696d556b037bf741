"""Tool calls read from generated text: Qwen's ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

The text is the policy's, hence hostile: the call's body is bounded before it is parsed, JSON's
``NaN``/``Infinity`` are refused, nesting too deep for the parser is an invalid call, and only the
first call of a turn runs (the rest is reported in the observation).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
#: the most characters of one call's JSON body
MAX_CALL_CHARS = 4096


@dataclass
class ToolCall:
    """A call read from a turn: the tool's ``name`` and ``arguments``, or ``error`` when the text held a
    call that could not be read (``name`` and ``arguments`` are then empty); ``extra``: further calls
    in the same turn, not run."""

    name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    extra: int = 0


@dataclass(frozen=True)
class ToolCallRecord:
    """One call an episode made, as a reward reads it (``RewardInput.tool_calls``): the tool's ``name``
    and ``arguments`` as the policy wrote them (empty when the call could not be read), the policy
    ``turn`` (from 1) that wrote it, whether it was refused (``invalid``: an unreadable call, an
    unknown tool, arguments the schema or the tool refused), why (``reason``: the observation that
    said so; None for a valid call) and the ``frames`` the tool returned."""

    name: str
    arguments: dict[str, Any]
    turn: int
    invalid: bool = False
    frames: int = 0
    reason: str | None = None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a tool takes")


def parse_tool_call(text: str) -> ToolCall | None:
    """The first tool call of ``text``; None when it holds none (the policy answered)."""
    start = text.find(OPEN)
    if start < 0:
        return None
    body_start = start + len(OPEN)
    end = text.find(CLOSE, body_start, body_start + MAX_CALL_CHARS + len(CLOSE))
    if end < 0:
        if len(text) - body_start > MAX_CALL_CHARS:
            return ToolCall(error=f"the tool call is longer than {MAX_CALL_CHARS} characters")
        return ToolCall(error=f"the tool call has no closing {CLOSE}")
    extra = text.count(OPEN, end)
    try:
        call = json.loads(text[body_start:end], parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        reason = str(exc).splitlines()[0][:120] if isinstance(exc, ValueError) else "nested too deeply"
        return ToolCall(error=f"the tool call is not valid JSON ({reason})", extra=extra)
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return ToolCall(error='the tool call must be {"name": ..., "arguments": {...}}', extra=extra)
    arguments = call.get("arguments", {})
    if not isinstance(arguments, dict):
        return ToolCall(error="the tool call's arguments must be an object", extra=extra)
    return ToolCall(call["name"], arguments, extra=extra)
