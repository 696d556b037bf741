"""The tool kind: schema checks of hostile arguments, the built-in video tools over cached frames, reading
tool calls from generated text, and registration through the hook."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import pytest
import torch

from videorl.api import (
    FrameSource,
    ToolContext,
    ToolResult,
    VideoMetadata,
    hookimpl,
    parse_tool_call,
    run_tool,
)
from videorl.errors import DuplicateComponentError, UnknownComponentError
from videorl.testing import assert_tool_contract
from videorl.tools.video import GetFrames, Seek, Zoom

FACTOR = 28


def _source(frames: int = 16, fps: float = 2.0) -> FrameSource:
    """16 frames at 2 fps (0 … 7.5 s), 56×84; each frame's pixels hold its index."""
    pixels = torch.arange(frames, dtype=torch.uint8).view(frames, 1, 1, 1).expand(frames, 3, 56, 84).clone()
    return FrameSource(pixels, VideoMetadata.every_frame(frames, 56, 84, fps=fps))


def _context() -> ToolContext:
    return ToolContext("s1", _source(), factor=FACTOR, max_frames=8, zoom_max_pixels=4 * 28 * 28 * 4)


def _tools() -> dict[str, object]:
    return {t.name: t for t in (GetFrames(), Seek(), Zoom())}


def test_get_frames_keeps_the_real_frame_indices_and_times() -> None:
    result = run_tool(_tools(), "get_frames", {"start": 2.0, "end": 4.0, "n": 4}, _context())  # type: ignore[arg-type]
    assert not result.invalid, result.text
    ((frames, meta),) = result.videos
    # frames at 2.0, 2.5, 3.0, 3.5, 4.0 (indices 4..8); 4 evenly spread: 4, 5(5.33→5), 7(6.67→7), 8
    assert meta.frame_indices == (4, 5, 7, 8)
    assert meta.timestamps == (2.0, 2.5, 3.5, 4.0)
    assert frames[:, 0, 0, 0].tolist() == [4, 5, 7, 8]
    assert meta.source_fps == 2.0 and meta.total_frames == 16
    assert meta.duration == pytest.approx(4 * (2.0 / 3))  # rate = the chosen frames' spacing
    assert result.text == "4 frames from 2.00 s to 4.00 s:"


def test_get_frames_pads_an_odd_count_to_the_temporal_patch() -> None:
    frames, meta = _source().segment(2.0, 3.0, 8)  # 2.0, 2.5, 3.0 inside: 3 frames, the last repeated
    assert meta.frame_indices == (4, 5, 6, 6)
    assert frames.shape[0] == 4


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"start": 2.0, "end": 1.0, "n": 2}, "must come after start"),
        ({"start": 0.0, "end": 99.0, "n": 2}, "outside the video"),
        ({"start": 0.0, "end": 4.0, "n": 9}, "more than the 8 frames"),
        ({"start": 0.0, "end": 4.0, "n": 2.5}, "must be an integer"),
        ({"start": math.nan, "end": 4.0, "n": 2}, "must be finite"),
        ({"start": True, "end": 4.0, "n": 2}, "must be a number"),
        ({"start": "0", "end": 4.0, "n": 2}, "must be a number"),
        ({"start": 0.0, "end": 4.0}, "needs the argument 'n'"),
        ({"start": 0.0, "end": 4.0, "n": 2, "fps": 3}, "takes no argument 'fps'"),
        ({"start": -1.0, "end": 4.0, "n": 2}, "outside [0, None]"),
        ([1, 2], "must be an object"),
    ],
)
def test_bad_get_frames_calls_are_observations(arguments: object, says: str) -> None:
    result = run_tool(_tools(), "get_frames", arguments, _context())  # type: ignore[arg-type]
    assert result.invalid and says in result.text and not result.videos


def test_unknown_tool_and_sample_without_video() -> None:
    unknown = run_tool(_tools(), "get_frame", {}, _context())  # type: ignore[arg-type]
    assert unknown.invalid and "no tool 'get_frame'" in unknown.text
    none = run_tool(_tools(), "seek", {"t": 1.0}, ToolContext("s2"))  # type: ignore[arg-type]
    assert none.invalid and "no video" in none.text


def test_seek_and_zoom() -> None:
    seek = run_tool(_tools(), "seek", {"t": 3.2}, _context())  # type: ignore[arg-type]
    assert seek.images[0][0, 0, 0] == 6 and seek.text == "The frame at 3.00 s:"  # 3.0 s is nearest 3.2
    zoom = run_tool(_tools(), "zoom", {"t": 1.0, "box": [0.0, 0.0, 0.5, 0.5]}, _context())  # type: ignore[arg-type]
    (image,) = zoom.images
    assert image.dtype == torch.uint8 and image.shape[1] % FACTOR == 0 and image.shape[2] % FACTOR == 0
    assert image.shape[1] * image.shape[2] <= 4 * 28 * 28 * 4 and image.shape[1] > 28  # enlarged from 28×42
    assert int(image[0].min()) == int(image[0].max()) == 2  # frame 2 (1.0 s), uniform
    bad = run_tool(_tools(), "zoom", {"t": 1.0, "box": [0.5, 0.0, 0.2, 0.5]}, _context())  # type: ignore[arg-type]
    assert bad.invalid and "x1 < x2" in bad.text


@pytest.mark.parametrize("tool", [GetFrames(), Seek(), Zoom()], ids=lambda t: t.name)
def test_builtin_tools_pass_the_contract(tool: object) -> None:
    valid = {
        "get_frames": [{"start": 0.0, "end": 7.5, "n": 8}],
        "seek": [{"t": 7.5}],
        "zoom": [{"t": 0.0, "box": [0.1, 0.2, 0.9, 0.8]}],
    }[tool.name]  # type: ignore[attr-defined]
    assert_tool_contract(tool, _context(), valid)  # type: ignore[arg-type]


def test_a_tool_that_raises_on_hostile_input_fails_the_contract() -> None:
    class Fragile:
        name, description = "fragile", "divides"
        parameters: ClassVar = {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}

        def call(self, arguments, context):  # type: ignore[no-untyped-def]
            return ToolResult(str(1 / arguments["x"]))

    with pytest.raises(AssertionError, match="raised ZeroDivisionError"):
        assert_tool_contract(Fragile(), _context(), [{"x": 1}])  # type: ignore[arg-type]


class Fixed:
    """A tool without arguments whose every call returns ``result``."""

    name, description = "fixed", "shows what it was given"
    parameters: ClassVar = {"type": "object", "properties": {}}

    def __init__(self, result: ToolResult) -> None:
        self.result = result

    def call(self, arguments, context):  # type: ignore[no-untyped-def]
        return self.result


def _segment(times: tuple[float, ...]) -> ToolResult:
    frames, meta = _source().segment(0.0, 7.5, len(times))
    return ToolResult("", videos=[(frames, dataclasses.replace(meta, timestamps=times))])


@pytest.mark.parametrize(
    ("result", "says"),
    [
        (_segment((100.0, 100.5)), r"a frame at 100.5 s lies past the video's end \(8.05 s\)"),
        (_segment((3.0, 1.0)), r"frame times must not decrease, got \[3.0, 1.0\]"),
        (_segment((math.nan, 1.0)), "frame times must be finite seconds >= 0"),
        (_segment((0.0,) * 10), r"10 frames returned, more than context.max_frames \(8\)"),
        (
            ToolResult("", images=[torch.zeros(3, 168, 112, dtype=torch.uint8)]),
            "over context.zoom_max_pixels",
        ),
        (ToolResult("x" * 5000), "5000 characters of text"),
    ],
    ids=["late", "backwards", "nan", "many", "huge", "verbose"],
)
def test_a_tool_returning_false_times_or_too_much_fails_the_contract(result: ToolResult, says: str) -> None:
    with pytest.raises(AssertionError, match=says):
        assert_tool_contract(Fixed(result), _context(), [{}])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "name", "error"),
    [
        ('Look.<tool_call>{"name": "seek", "arguments": {"t": 1}}</tool_call>', "seek", None),
        ("The answer is B.", None, None),
        ("<tool_call>{not json}</tool_call>", "", "not valid JSON"),
        ('<tool_call>{"name": "seek", "arguments": {"t": NaN}}</tool_call>', "", "not valid JSON"),
        ("<tool_call>" + "[" * 3000 + "]" * 3000 + "</tool_call>", "", "longer than 4096"),
        ("<tool_call>" + "[" * 2000 + "]" * 2000 + "</tool_call>", "", "not valid JSON"),
        ('<tool_call>{"name": "seek", "arguments": {"t": 1}}', "", "no closing"),
        ('<tool_call>["seek"]</tool_call>', "", '{"name": ...'),
        ('<tool_call>{"name": "seek", "arguments": [1]}</tool_call>', "", "must be an object"),
    ],
)
def test_tool_calls_read_from_hostile_text(text: str, name: str | None, error: str | None) -> None:
    call = parse_tool_call(text)
    if name is None:
        assert call is None
        return
    assert call is not None and call.name == name
    assert (call.error is None) if error is None else (error in (call.error or ""))


def test_second_call_of_a_turn_is_counted_not_run() -> None:
    call = parse_tool_call('<tool_call>{"name": "seek", "arguments": {"t": 1}}</tool_call>' * 3)
    assert call is not None and call.arguments == {"t": 1} and call.extra == 2


class _Echo:
    name, description = "get_frames", "a plugin's tool under a built-in's name"
    parameters: ClassVar = {"type": "object", "properties": {}}

    def call(self, arguments, context):  # type: ignore[no-untyped-def]
        raise AssertionError


def test_tools_register_through_the_hook_and_collide_loudly(videorl_plugins) -> None:  # type: ignore[no-untyped-def]
    plugins = videorl_plugins()
    assert {"get_frames", "seek", "zoom"} <= set(plugins.tools.names())
    assert isinstance(plugins.tools.create("get_frames"), GetFrames)
    with pytest.raises(UnknownComponentError, match="Did you mean 'get_frames'"):
        plugins.tools.canonical("get_frame")

    class Plugin:
        @staticmethod
        @hookimpl
        def register_tools(register):  # type: ignore[no-untyped-def]
            register("get_frames", _Echo)

    clash = videorl_plugins(Plugin)
    with pytest.raises(DuplicateComponentError, match="tool 'get_frames' is registered twice"):
        clash.tools.create("get_frames")


def test_the_worked_examples_of_the_docs_pass_the_contract() -> None:
    """docs/plugin-authors/tools.md's example tool and its contract check run as written, and its
    example reward scores an episode's calls."""
    import re
    from pathlib import Path

    from videorl.rewards import RewardInput
    from videorl.tools import ToolCallRecord

    doc = (Path(__file__).resolve().parents[2] / "docs" / "plugin-authors" / "tools.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    assert len(blocks) == 4, "the page shows the tool, its checks, then a reward over the episode"
    assert "assert_workflow_contract(workflow, config, backend, call=call)" in blocks[2]  # needs a model:
    # the contrib package's tests run that check on a tiny checkpoint
    namespace: dict[str, object] = {}
    exec(blocks[0] + blocks[1], namespace)  # the check ends in assert_tool_contract(FrameDiff(), ...)
    tool = namespace["FrameDiff"]()  # type: ignore[operator]
    result = run_tool({"frame_diff": tool}, "frame_diff", {"t0": 0.0, "t1": 3.0}, _context())
    assert result.text == "Change between 0.00 s and 3.00 s: 6.0"  # frames hold their index: |0 - 6|
    exec(blocks[3], namespace)
    reward = namespace["GroundedSearch"]()  # type: ignore[operator]
    calls = (
        ToolCallRecord("get_frames", {"start": 5.0, "end": 1.0, "n": 4}, turn=1, invalid=True),
        ToolCallRecord("get_frames", {"start": 2.0, "end": 4.0, "n": 4}, turn=2, frames=4),
    )
    inp = RewardInput("<answer>B</answer>", "multiple choice", "B", extra={"event_time": 3}, tool_calls=calls)
    assert reward(inp).score == 1.0 and reward(inp).parts == {"accuracy": 1.0, "grounding": 1.0}
    missed = RewardInput(
        "<answer>B</answer>", "multiple choice", "B", extra={"event_time": 3}, tool_calls=calls[:1]
    )
    assert reward(missed).score == 0.5  # the only window asked for was refused
