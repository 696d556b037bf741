"""The demo really learns: shorter runs of `videorl demo` lift held-out accuracy well above chance, and
the order task reads the order of the frames (the reversed control falls while held-out accuracy rises);
`--json` ends with the figures, and the seek task's tool sees the window only when it decodes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from videorl import demo, demo_seek
from videorl.plugins import load_plugins
from videorl.rollout.tool_agent import offline_turns
from videorl.runs.history import read_metrics

ORDER_STEPS, ORDER_FLOOR = 60, 0.8  # the full order demo (150 steps) is at 1.0 from about step 50


@pytest.mark.slow
def test_a_short_demo_run_learns_the_colour_from_pixels(tmp_path: Path) -> None:
    result = demo.run(
        tmp_path,
        load_plugins(),
        task="colour",
        steps=150,  # at 100 steps held-out accuracy still swings between 0.4 and 0.75
        seed=0,
        val_clips=32,
        extra=["trainer.progress_bar=false"],
    )
    assert result.before <= 0.3  # a random policy: chance (0.25) or worse, without the answer format
    assert result.after >= 0.9, f"held-out accuracy {result.after} after 150 steps (chance 0.25)"
    assert result.control_after >= 0.8  # any frame answers the colour: reversing the clips changes nothing
    assert result.curve is not None and result.curve.stat().st_size > 10_000
    assert (result.run_dir / "checkpoints").is_dir()


@pytest.mark.slow
def test_a_short_order_demo_run_reads_the_order_of_the_frames(tmp_path: Path) -> None:
    result = demo.run(
        tmp_path,
        load_plugins(),
        task="order",
        steps=ORDER_STEPS,
        seed=0,
        val_clips=32,
        extra=["trainer.progress_bar=false"],
    )
    assert result.before <= 0.3 and result.control_before <= 0.3
    # a model that ignores the order scores the same on the reversed clips; one that reads it falls to 0
    assert result.after >= ORDER_FLOOR, f"held-out accuracy {result.after} after {ORDER_STEPS} steps"
    assert result.after - result.control_after >= 0.4, (result.after, result.control_after)
    assert result.curve is not None and result.curve.stat().st_size > 10_000


@pytest.mark.slow
# the colour task reports through the same code as the order task (one control, the reversed clips)
@pytest.mark.parametrize("task", [demo.DEFAULT_TASK, demo.SEEK])
def test_demo_json_ends_with_one_line_of_the_figures(task: str, tmp_path: Path) -> None:
    """`videorl demo --json`, one step on a few clips: stdout is one JSON line of the figures (the report
    goes to stderr); the seek run's offline trajectory called get_frames and answered right, and its
    control (the tool blind) ran."""
    from click.testing import CliRunner

    from videorl.cli import make_cli

    args = ["demo", "--task", task, "--steps", "1", "--train-clips", "16", "--val-clips", "4", "--json"]
    args += ["--out", str(tmp_path), "trainer.progress_bar=false"]
    result = CliRunner().invoke(make_cli(load_plugins()), args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (line,) = result.stdout.splitlines()
    figures = json.loads(line)
    assert sorted(figures) == ["control_after", "heldout_after", "heldout_before", "minutes"]
    for key in ("heldout_before", "heldout_after", "control_after"):  # every task has a control
        assert isinstance(figures[key], float) and 0 <= figures[key] <= 1, (key, figures)
    assert isinstance(figures["minutes"], float) and figures["minutes"] > 0
    assert "held-out accuracy:" in result.stderr
    if task == demo.SEEK:
        (step,) = read_metrics(tmp_path / "run" / "metrics.jsonl")
        # one offline trajectory per group (16 prompts), each fetched its window and answered right
        assert step["offline/count"] == 16 and step["offline/accuracy"] == 1.0
        assert "tool blind:" in result.stderr
    rows = [json.loads(r) for r in (tmp_path / demo.SCORES).read_text().splitlines()]
    control = "val/accuracy/blind" if task == demo.SEEK else f"val/accuracy/{demo.REVERSED}"
    # step 0, the validation of step 1, the final scores (step 1 again)
    assert [r["step"] for r in rows] == [0, 1, 1] and rows[-1][control] == figures["control_after"]


def test_the_seek_window_shows_the_flash_only_when_the_tool_decodes_it(tmp_path: Path) -> None:
    """A seek clip flashing red in 12-16 s (the mark's top-right cell): get_frames over that window shows
    red when the tool decodes the window (``tool_frames: decode``), and only the dark overview frames
    when it serves the prompt's 4 frames (the control)."""
    import random

    from videorl.media import DecodeParams, ImageParams, MediaCache
    from videorl.media.loader import MediaLoader
    from videorl.media.synthetic import write_video
    from videorl.tools import ToolContext
    from videorl.tools.video import FrameSource, GetFrames, WindowSource

    path = tmp_path / "clip.mp4"
    write_video(path, demo_seek.seek_frames(demo.COLOURS["red"], 1, random.Random(0)), fps=demo_seek.FPS)
    params = DecodeParams(
        factor=28, temporal_patch_size=2, fps=2.0, max_frames=4, min_pixels=3136, max_pixels=3136
    )
    loader = MediaLoader(
        MediaCache(tmp_path / "cache", "prefer_preprocessed"), params, ImageParams(factor=28)
    )
    overview = loader.video(str(path))
    assert overview[1].timestamps == (0.0, 10.5, 21.0, 31.5)  # none in the flash windows (4-8, 12-16 ...)
    call = {"start": 12, "end": 16, "n": 2}
    window = WindowSource(*overview, lambda s, e: loader.video(str(path), clip=(s, e)))
    seen = GetFrames().call(call, ToolContext("s", window)).videos[0]
    assert seen[1].timestamps == (12.0, 15.5)
    cell = seen[0][:, :, 28:, :28].float().mean(dim=(2, 3))  # bottom-left: flashes (the mark is top-right)
    assert (cell[:, 0] > 150).all() and (cell[:, 1:] < 90).all(), cell  # red
    blind = GetFrames().call(call, ToolContext("s", FrameSource(*overview))).videos[0]
    assert blind[1].timestamps == (10.5, 10.5)  # the overview frame nearest the window: no flash
    assert (blind[0][:, :, 28:, :28].float().mean() < 40).all()


def test_the_seek_offline_trajectory_calls_the_window_then_answers() -> None:
    text = demo_seek.offline_output(2, "C")
    assert text == (
        '<tool_call>{"name":"get_frames","arguments":{"start":16,"end":20,"n":2}}</tool_call>'
        "<answer>C</answer>"
    )
    assert offline_turns(text) == [text[: text.index("<answer>")], "<answer>C</answer>"]
    assert offline_turns("<answer>C</answer>") == ["<answer>C</answer>"]
    assert offline_turns("<tool_call>{}</tool_call>") == ["<tool_call>{}</tool_call>"]
