"""The frame_diff tool against videorl's tool contract, inside the tool_agent workflow against the
workflow contract (on a tiny checkpoint of the first-party models plugin), and its value on frames
made here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from videorl_tool_frame_diff.tool import FrameDiff

from videorl.api import FrameSource, ToolArgumentError, ToolContext, VideoMetadata, backend_for_model
from videorl.testing import assert_tool_contract, assert_workflow_contract, tool_agent

CALL = '<tool_call>{"name": "frame_diff", "arguments": {"t0": 0.0, "t1": 3.0}}</tool_call>'


def _context() -> ToolContext:
    frames = torch.zeros(8, 3, 56, 56, dtype=torch.uint8)
    frames[4:] = 200  # the picture changes at frame 4 (2 s at 2 fps)
    return ToolContext("s", FrameSource(frames, VideoMetadata.every_frame(8, 56, 56, fps=2.0)), factor=28)


def test_frame_diff_passes_the_tool_contract() -> None:
    assert_tool_contract(FrameDiff(), _context(), [{"t0": 0.0, "t1": 3.0}, {"t0": 0.5, "t1": 1.0}])


def test_frame_diff_in_the_tool_agent_workflow_passes_the_workflow_contract(
    tmp_path: Path, videorl_plugins: Callable[..., Any]
) -> None:
    tiny = pytest.importorskip("videorl_models.tiny", reason="a tiny checkpoint: pip install videorl-models")
    model = tiny.build_tiny("qwen2_5_vl", tmp_path / "tiny", seed=0)
    backend = backend_for_model(model, videorl_plugins(entry_points=True).model_backends)
    workflow, config = tool_agent(FrameDiff())
    episodes = assert_workflow_contract(workflow, config, backend, call=CALL)
    # the reply, a text turn of the tool's observation, trained on by no one
    reply = episodes[0].segments[1]
    assert not reply.trained and "Change between 0.00 s and 3.00 s" in backend.tokenizer.decode(
        reply.token_ids
    )


def test_frame_diff_sees_the_change_and_refuses_times_past_the_end() -> None:
    tool = FrameDiff()
    assert tool.call({"t0": 0.0, "t1": 3.0}, _context()).text == "Change between 0.00 s and 3.00 s: 200.0"
    assert tool.call({"t0": 0.0, "t1": 1.5}, _context()).text == "Change between 0.00 s and 1.50 s: 0.0"
    with pytest.raises(ToolArgumentError, match=r"within the video \(0 to 4.00 s\)"):
        tool.call({"t0": 0.0, "t1": 9.0}, _context())  # the workflow turns it into an observation


def test_the_tool_is_registered_through_the_entry_point(videorl_plugins: Callable[..., Any]) -> None:
    assert isinstance(videorl_plugins().tools.create("frame_diff"), FrameDiff)
