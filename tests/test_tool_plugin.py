"""A third-party tool (contrib/videorl-tool-frame-diff) as a stranger uses it: built into a wheel,
installed into a throwaway folder (the ``install_plugin`` fixture), checked with
``videorl.testing.assert_tool_contract`` and, inside the tool_agent workflow, ``assert_workflow_contract``
from the installed copy, and trained with through the CLI for a
step of ``rollout.workflow=tool_agent`` with ``rollout.tools=[get_frames,frame_diff]`` over a dataset
whose rows mix the agent and single-turn workflows."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from videorl.backend import backend_for_model
from videorl.media import VideoMetadata
from videorl.testing import assert_tool_contract, assert_workflow_contract, tool_agent
from videorl.tools import ToolContext
from videorl.tools.video import FrameSource

ROOT = Path(__file__).resolve().parents[1]
FRAME_DIFF = ROOT / "contrib" / "videorl-tool-frame-diff"


@pytest.mark.slow
def test_a_pip_installed_tool_passes_its_contract_and_trains_through_the_cli(
    tmp_path: Path, install_plugin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from videorl import demo
    from videorl.plugins import load_plugins

    site = install_plugin(FRAME_DIFF, tmp_path)
    monkeypatch.syspath_prepend(str(site))
    tool = importlib.import_module("videorl_tool_frame_diff.tool").FrameDiff()
    assert str(importlib.import_module("videorl_tool_frame_diff").__file__).startswith(str(site))
    frames = torch.zeros(8, 3, 56, 56, dtype=torch.uint8)
    frames[4:] = 200
    context = ToolContext("s", FrameSource(frames, VideoMetadata.every_frame(8, 56, 56, fps=2.0)), factor=28)
    assert_tool_contract(tool, context, [{"t0": 0.0, "t1": 3.0}])
    assert tool.call({"t0": 0.0, "t1": 3.0}, context).text == "Change between 0.00 s and 3.00 s: 200.0"

    model, train, val = demo.prepare(tmp_path, load_plugins(), family="qwen2_5_vl", seed=0, train=2, val=1)
    workflow, config = tool_agent(tool)
    call = '<tool_call>{"name": "frame_diff", "arguments": {"t0": 0.0, "t1": 3.0}}</tool_call>'
    assert_workflow_contract(
        workflow, config, backend_for_model(model, load_plugins().model_backends), call=call
    )
    rows = [json.loads(line) for line in train.read_text().splitlines()]
    for row in rows[1::2]:
        row["workflow"] = "single_turn"  # the others take the run's tool_agent
    train.write_text("".join(json.dumps(row) + "\n" for row in rows))
    run = tmp_path / "run"
    overrides = [
        *demo.demo_overrides(tmp_path, model, train, val, steps=1, seed=3, engine="hf"),
        f"output_dir={run}", "data.rollout_batch_size=2", "actor.global_batch_size=2", "rollout.n=2",
        "trainer.val_every=0", "trainer.save_every=0", "trainer.progress_bar=false",
        "rollout.enable_mix_policy=false", "algorithm.dynamic_sampling=false", "rollout.workflow=tool_agent",
        "rollout.tools=[get_frames,frame_diff]", "rollout.max_response_length=24",
        "data.max_prompt_length=2048",  # the tools' descriptions in the system turn: ~500 tiny tokens
    ]  # fmt: skip
    (tmp_path / "empty.yaml").write_text("seed: 0\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIDEORL_")}
    env.update(OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "videorl.cli", "train", str(tmp_path / "empty.yaml"), *overrides]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (row,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert row["step"] == 1 and row["workflow/tool_agent"] == 1.0 and row["workflow/single_turn"] == 1.0
    # the random tiny model writes no call: each agent episode is one turn
    assert row["tool/turns_per_episode"] == 1.0 and row["rollout/logprob_diff"] < 1e-5
