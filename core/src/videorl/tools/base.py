"""What a tool is (:class:`Tool`), what it returns (:class:`ToolResult`), and the one way a call runs
(:func:`run_tool`): arguments checked against the tool's JSON schema, then the tool's own checks; a bad
call becomes an observation saying what was wrong, never an exception.

A tool's arguments come from model output, so they are hostile: :func:`check_arguments` accepts a
small, bounded subset of JSON schema (an object of named properties of type ``number``, ``integer``,
``string``, ``boolean`` or ``array`` of numbers, with ``required``, ``minimum``/``maximum``,
``minItems``/``maxItems``, ``maxLength``), rejects unknown keys, non-finite numbers and booleans given
as numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from videorl.errors import VideorlError

if TYPE_CHECKING:
    import torch

    from videorl.media import VideoMetadata

#: the JSON-schema types a tool's parameters may use
SCHEMA_TYPES = ("number", "integer", "string", "boolean", "array")
#: the most characters of a string argument, whatever the schema says
MAX_STRING = 1024
#: the most items of an array argument, whatever the schema says
MAX_ITEMS = 64


class ToolArgumentError(VideorlError, ValueError):
    """A tool call's arguments are invalid; the message (one line) becomes the observation."""


@dataclass
class ToolResult:
    """What a call returns: ``text`` for the model, and media to show it: ``videos`` (uint8
    ``T×3×H×W`` frames with the :class:`~videorl.media.VideoMetadata` of their real times) and
    ``images`` (uint8 ``3×H×W``). ``invalid``: the call was refused (``text`` says why)."""

    text: str = ""
    videos: list[tuple[torch.Tensor, VideoMetadata]] = field(default_factory=list)
    images: list[torch.Tensor] = field(default_factory=list)
    invalid: bool = False

    @property
    def frames(self) -> int:
        """Frames shown: each video's frames and each image."""
        return sum(int(f.shape[0]) for f, _ in self.videos) + len(self.images)


@runtime_checkable
class Tool(Protocol):
    """A tool the policy may call: a ``name``, a ``description`` for the system prompt, the JSON schema
    of its ``parameters`` (an ``object``), and ``call``. ``call`` receives arguments already checked
    against the schema; it raises :class:`ToolArgumentError` for arguments the schema cannot judge
    (a time past the video's end), anything else being a bug of the tool."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult: ...


class VideoSource(Protocol):
    """The sample's video as tools see it (:class:`videorl.tools.video.FrameSource`)."""

    @property
    def duration(self) -> float: ...

    def segment(self, start: float, end: float, n: int) -> tuple[torch.Tensor, VideoMetadata]: ...

    def frame(self, t: float) -> tuple[torch.Tensor, float]: ...


@dataclass
class ToolContext:
    """What a call may read: the sample's id (for messages), its video (None: a sample without one),
    the size factor frames' sides must be multiples of, the most frames one call may return and the
    pixel budget of a zoomed image."""

    sample_id: str
    video: VideoSource | None = None
    factor: int = 28
    max_frames: int = 16
    zoom_max_pixels: int = 401_408


def _check_number(key: str, value: Any, spec: Mapping[str, Any], integer: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ToolArgumentError(f"argument {key!r} must be a number, got {type(value).__name__}")
    if integer and not (isinstance(value, int) or float(value).is_integer()):
        raise ToolArgumentError(f"argument {key!r} must be an integer, got {value!r}")
    if not math.isfinite(value):
        raise ToolArgumentError(f"argument {key!r} must be finite, got {value!r}")
    low, high = spec.get("minimum"), spec.get("maximum")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ToolArgumentError(f"argument {key!r} = {value!r} is outside [{low}, {high}]")


def _check_value(key: str, value: Any, spec: Mapping[str, Any]) -> None:
    kind = spec.get("type")
    if kind in ("number", "integer"):
        _check_number(key, value, spec, kind == "integer")
    elif kind == "string":
        if not isinstance(value, str):
            raise ToolArgumentError(f"argument {key!r} must be a string, got {type(value).__name__}")
        if len(value) > min(int(spec.get("maxLength", MAX_STRING)), MAX_STRING):
            raise ToolArgumentError(f"argument {key!r} is longer than {spec.get('maxLength', MAX_STRING)}")
    elif kind == "boolean":
        if not isinstance(value, bool):
            raise ToolArgumentError(f"argument {key!r} must be true or false, got {value!r}")
    elif kind == "array":
        if not isinstance(value, list):
            raise ToolArgumentError(f"argument {key!r} must be a list, got {type(value).__name__}")
        low, high = int(spec.get("minItems", 0)), min(int(spec.get("maxItems", MAX_ITEMS)), MAX_ITEMS)
        if not low <= len(value) <= high:
            raise ToolArgumentError(f"argument {key!r} must have {low} to {high} items, got {len(value)}")
        items = spec.get("items", {})
        for i, item in enumerate(value):
            _check_value(f"{key}[{i}]", item, items)
    else:
        raise ToolArgumentError(f"argument {key!r}: the tool's schema has an unsupported type {kind!r}")


def check_arguments(tool: Tool, arguments: Any) -> dict[str, Any]:
    """``arguments`` checked against ``tool.parameters`` (raises :class:`ToolArgumentError`)."""
    if not isinstance(arguments, dict):
        raise ToolArgumentError(
            f"the arguments of {tool.name} must be an object, got {type(arguments).__name__}"
        )
    properties: Mapping[str, Any] = tool.parameters.get("properties", {})
    unknown = [k for k in arguments if k not in properties]
    if unknown:
        raise ToolArgumentError(
            f"{tool.name} takes no argument {str(unknown[0])[:40]!r}; "
            f"it takes {', '.join(properties) or 'none'}"
        )
    missing = [k for k in tool.parameters.get("required", ()) if k not in arguments]
    if missing:
        raise ToolArgumentError(f"{tool.name} needs the argument {missing[0]!r}")
    for key, value in arguments.items():
        _check_value(key, value, properties[key])
    return dict(arguments)


def check_tool_schema(tool: Tool) -> None:
    """Refuse a tool whose ``parameters`` use what :func:`check_arguments` cannot check (a
    :class:`TypeError` naming the tool and the property)."""
    params = tool.parameters
    if params.get("type") != "object" or not isinstance(params.get("properties", {}), Mapping):
        raise TypeError(
            f"tool {tool.name!r}: parameters must be a JSON schema of type 'object' with 'properties'"
        )
    for key, spec in params.get("properties", {}).items():
        if not isinstance(spec, Mapping) or spec.get("type") not in SCHEMA_TYPES:
            raise TypeError(f"tool {tool.name!r}: property {key!r} must have a type among {SCHEMA_TYPES}")
    unknown = [k for k in params.get("required", ()) if k not in params.get("properties", {})]
    if unknown:
        raise TypeError(f"tool {tool.name!r}: required property {unknown[0]!r} is not among its properties")


def run_tool(tools: Mapping[str, Tool], name: Any, arguments: Any, context: ToolContext) -> ToolResult:
    """The result of calling ``name`` with ``arguments``: an unknown tool, arguments the schema refuses
    and a :class:`ToolArgumentError` of the tool all return an ``invalid`` result saying what was wrong."""
    tool = tools.get(name) if isinstance(name, str) else None
    if tool is None:
        shown = str(name)[:40] if isinstance(name, str) else type(name).__name__
        return ToolResult(
            f"Error: no tool {shown!r}; the tools are {', '.join(sorted(tools))}.", invalid=True
        )
    try:
        return tool.call(check_arguments(tool, arguments), context)
    except ToolArgumentError as exc:
        return ToolResult(f"Error: {exc}", invalid=True)


def tool_spec(tool: Tool) -> dict[str, Any]:
    """The tool as chat templates take it (``tools=[...]`` of ``apply_chat_template``)."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": dict(tool.parameters)},
    }
