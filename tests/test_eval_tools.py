"""Evaluation with tools: ``videorl eval run --workflow tool_agent`` (flags or a config file) and a
``trainer.benchmarks`` entry with a ``workflow`` answer each row through the tool_agent loop; the
predictions record every call (name, arguments, valid, reason, frames) and the summary sums them up.

The rows are MVBench's (official layout, real H.264 clips); the calls come from
``videorl.testing.ScriptedEngine`` (registered by a one-off ``--plugin`` module), so that the calls,
their observations and the scores are known by hand; one run uses the hf engine on the tiny model.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from videorl.backend import backend_for_model
from videorl.config import TrainConfig, load_config
from videorl.errors import ConfigError, VideorlError
from videorl.eval import read_predictions, read_results
from videorl.media.synthetic import textured_frames, write_video
from videorl.plugins import load_plugins
from videorl.testing import ScriptedEngine
from videorl.train.benchmarks import BenchmarkPasses, evaluator_runner

FAMILY = "qwen2_5_vl"
CANDIDATES = ["red", "green", "blue"]
GOOD = '<tool_call>{"name": "get_frames", "arguments": {"start": 0, "end": 1, "n": 2}}</tool_call>'
BAD = '<tool_call>{"name": "get_frames", "arguments": {"start": 1.5, "end": 0.5, "n": 2}}</tool_call>'
#: row 0 (A) looks, then answers right; row 1 (B) asks badly, then answers wrong; row 2 (C) answers
SCRIPT = {
    "mvbench:object_existence/0": [GOOD, "(A)"],
    "mvbench:object_existence/1": [BAD, "(C)"],
    "mvbench:object_existence/2": ["(C)"],
}
PLUGIN = f"""
from videorl.api import hookimpl
from videorl.testing import ScriptedEngine


class Scripted(ScriptedEngine):
    replies = {SCRIPT!r}


@hookimpl
def register_rollout_engines(register):
    register("scripted", Scripted)
"""
BUDGET = ["data.video_fps=2", "data.video_max_frames=4", "data.video_max_pixels=6000"]


@pytest.fixture(scope="module")
def mvbench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three object_existence rows answered A, B, C; 2 s clips at 10 fps, 64×80 px."""
    root = tmp_path_factory.mktemp("mvbench")
    videos = root / "video" / "clevrer" / "video_validation"
    videos.mkdir(parents=True)
    rows = []
    for i in range(3):
        write_video(videos / f"clip-{i}.mp4", textured_frames(20, 64, 80, seed=i), fps=10.0)
        rows.append(
            {"video": f"clip-{i}.mp4", "question": f"What colour is square {i}?", "candidates": CANDIDATES,
             "answer": CANDIDATES[i]}
        )  # fmt: skip
    (root / "json").mkdir()
    (root / "json" / "object_existence.json").write_text(json.dumps(rows), encoding="utf-8")
    return root


@pytest.fixture
def scripted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The global flags that register the ``scripted`` engine (a module written here)."""
    (tmp_path / "scripted_eval_engine.py").write_text(PLUGIN, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return ["--plugin", "scripted_eval_engine"]


def _check_predictions(path: Path) -> None:
    """What each row asked and got, as the script makes it (calls by hand below)."""
    records = {i: p.record for i, p in read_predictions(path).items()}
    looked, asked_badly, answered = (records[f"object_existence/{i}"] for i in range(3))
    assert looked["tool_calls"] == [
        {"name": "get_frames", "arguments": {"start": 0, "end": 1, "n": 2}, "turn": 1, "valid": True,
         "frames": 2},
    ]  # fmt: skip
    assert asked_badly["tool_calls"] == [
        {"name": "get_frames", "arguments": {"start": 1.5, "end": 0.5, "n": 2}, "turn": 1, "valid": False,
         "frames": 0, "reason": "Error: end (0.5 s) must come after start (1.5 s)"},
    ]  # fmt: skip
    assert answered["tool_calls"] == []
    assert [r["turns"] for r in (looked, asked_badly, answered)] == [2, 2, 1]
    assert [r["end"] for r in (looked, asked_badly, answered)] == ["stop"] * 3
    assert [r["response"] for r in (looked, asked_badly, answered)] == ["(A)", "(C)", "(C)"]  # the last turn
    assert [r["score"] for r in (looked, asked_badly, answered)] == [1.0, 0.0, 1.0]


TOOLS = {
    "samples": 3, "turns_per_sample": 1.6667, "calls_per_sample": 0.6667, "calls": {"get_frames": 2},
    "invalid_calls": 1, "frames": 2, "ends": {"stop": 3},
}  # fmt: skip


def test_eval_run_with_a_workflow_records_each_call_and_sums_them_up(
    tmp_path: Path,
    tiny_model_dir: Callable[[str], Path],
    run_cli: Callable[..., Any],
    scripted: list[str],
    mvbench: Path,
) -> None:
    model = tiny_model_dir(FAMILY)
    (tmp_path / "eval.yaml").write_text(
        f"output_dir: run\nmodel: {{path: {model}}}\nbenchmarks: [mvbench]\ndata_root: {mvbench}\n"
        "engine: {name: scripted}\nsampling: {max_tokens: 600}\nquiet: true\n"
        "rollout: {workflow: tool_agent, tools: [get_frames], max_turns: 3}\n",
        encoding="utf-8",
    )
    args = [*scripted, "eval", "run", str(tmp_path / "eval.yaml"), *BUDGET]
    result = run_cli(*args).assert_success()
    assert "mvbench: accuracy 66.67% (n=3, failed=0)" in result.output
    assert "tools: 1.67 turns per sample; calls: get_frames 2; 1 invalid; 2 frames fetched" in result.output
    run = tmp_path / "run"
    _check_predictions(run / "mvbench" / "predictions.jsonl")
    data = read_results(run)
    assert data["benchmarks"]["mvbench"]["tools"] == TOOLS
    assert data["settings"]["workflow"] == {
        "name": "tool_agent", "tools": ["get_frames"], "max_turns": 3, "max_frames_per_call": 16,
        "max_visual_tokens": None,
    }  # fmt: skip
    assert data["settings"]["pipeline"]["engine_mode"] == "workflow tool_agent, batched generate"
    rescored = run_cli(
        "eval", "score", "--benchmark", "mvbench", "--data-root", str(mvbench), "--predictions",
        str(run / "mvbench" / "predictions.jsonl"), "--json", "--resamples", "0",
    ).assert_success()  # fmt: skip
    assert rescored.json()["tools"] == TOOLS  # rescoring the file gives the same sums
    again = run_cli(*args).assert_success()  # resumed: every row is done, none asked again
    assert "3 already done" in again.output
    other = run_cli(*args, "rollout.max_turns=2")
    assert other.exit_code != 0 and "workflow.max_turns: 3 in the run, 2 now" in other.stderr


def test_the_flags_set_the_same_keys_and_unknown_names_say_the_closest(
    tmp_path: Path, tiny_model_dir: Callable[[str], Path], run_cli: Callable[..., Any], mvbench: Path
) -> None:
    base = ["eval", "run", "--model", str(tiny_model_dir(FAMILY)), "--benchmark", "mvbench", "--data-root",
            str(mvbench), "--out", str(tmp_path / "run")]  # fmt: skip
    shown = run_cli(*base, "--workflow", "tool_agent", "--tool", "get_frames", "--tool", "seek",
                    "--max-turns", "3", "--print-config").assert_success()  # fmt: skip
    assert (
        "rollout:\n  tools:\n  - get_frames\n  - seek\n  max_turns: 3\n  max_frames_per_call: 16\n"
        "  max_visual_tokens: null\n  workflow: tool_agent\n" in shown.output
    )
    unknown = run_cli(*base, "--workflow", "tool_agnet", "--tool", "get_frames")
    assert unknown.exit_code != 0
    assert "rollout.workflow (--workflow): unknown rollout workflow 'tool_agnet'" in unknown.stderr
    assert "Did you mean 'tool_agent'" in unknown.stderr
    tool = run_cli(*base, "--workflow", "tool_agent", "--tool", "get_frame")
    assert (
        tool.exit_code != 0
        and "rollout.tools: unknown tool 'get_frame'. Did you mean 'get_frames'" in tool.stderr
    )
    stray = run_cli(*base, "--tool", "get_frames")
    assert stray.exit_code != 0 and "rollout.tools are offered by a workflow" in stray.stderr
    assert not (tmp_path / "run").exists()  # every refusal before the run folder is touched


def test_eval_run_with_the_hf_engine_goes_through_the_agent_loop(
    tmp_path: Path, tiny_model_dir: Callable[[str], Path], run_cli: Callable[..., Any], mvbench: Path
) -> None:
    """The tiny random policy writes no call: one turn per row, ended by the budget or its answer."""
    run = tmp_path / "run"
    run_cli(
        "eval", "run", "--model", str(tiny_model_dir(FAMILY)), "--benchmark", "mvbench", "--data-root",
        str(mvbench), "--out", str(run), "--engine", "hf", "--workflow", "tool_agent", "--tool", "get_frames",
        "--limit", "2", "--max-tokens", "6", "--quiet", *BUDGET,
    ).assert_success()  # fmt: skip
    records = [p.record for p in read_predictions(run / "mvbench" / "predictions.jsonl").values()]
    assert len(records) == 2 and all(r["tool_calls"] == [] and r["turns"] == 1 for r in records)
    assert all(r["end"] in ("stop", "length") and r["num_output_tokens"] <= 6 for r in records)
    tools = read_results(run)["benchmarks"]["mvbench"]["tools"]
    assert tools["samples"] == 2 and tools["turns_per_sample"] == 1.0 and tools["calls"] == {}


def test_a_trainer_benchmark_with_a_workflow_logs_tool_metrics(
    tmp_path: Path, tiny_model_dir: Callable[[str], Path], mvbench: Path
) -> None:
    model, plugins = tiny_model_dir(FAMILY), load_plugins()
    run = tmp_path / "run"
    config = load_config(
        None,
        [f"output_dir={run}", f"model.path={model}", "data.train_files=[unused.jsonl]", *BUDGET,
         "trainer.max_steps=1", "rollout.tools=[get_frames]", "rollout.enable_mix_policy=true",
         f"trainer.benchmarks=[{{name: mvbench, data_root: {mvbench}, workflow: tool_agent, "
         "max_tokens: 600}]",
         "trainer.benchmarks_strict=true"],
    )  # fmt: skip
    backend = backend_for_model(model, plugins.model_backends)
    passes = BenchmarkPasses(config, plugins, backend)  # mix-policy training: benchmark rows have none
    metrics = passes.run(1, evaluator_runner(ScriptedEngine(backend, SCRIPT)))
    assert metrics["bench/mvbench/overall"] == pytest.approx(2 / 3)
    assert metrics["bench/mvbench/tool/turns_per_sample"] == pytest.approx(1.6667)
    assert metrics["bench/mvbench/tool/calls/get_frames"] == 2.0
    assert metrics["bench/mvbench/tool/invalid_calls"] == 1.0 and metrics["bench/mvbench/tool/frames"] == 2.0
    _check_predictions(run / "benchmarks" / "step_000001" / "mvbench" / "mvbench" / "predictions.jsonl")
    again = ScriptedEngine(backend, SCRIPT)  # a resumed run repeating the step reads the pass back
    assert BenchmarkPasses(config, plugins, backend).run(1, evaluator_runner(again)) == metrics
    assert not again.asked
    config.rollout.max_turns = 2  # other workflow settings: not read back, and refused by name
    with pytest.raises(VideorlError, match="workflow.max_turns: 4 in the run, 2 now"):
        BenchmarkPasses(config, plugins, backend).run(1, evaluator_runner(again))
    wrong = load_config(None, [
        f"output_dir={run}", f"model.path={model}", "data.train_files=[unused.jsonl]",
        f"trainer.benchmarks=[{{name: mvbench, data_root: {mvbench}, workflow: agent}}]",
    ])  # fmt: skip
    with pytest.raises(
        ConfigError, match="trainer.benchmarks: mvbench: workflow: unknown rollout workflow 'agent'"
    ):
        BenchmarkPasses(wrong, plugins, backend)


def test_ray_refuses_a_benchmark_workflow_before_it_starts() -> None:
    from videorl.cluster.launch import _refuse_local_only
    from videorl.rollout.single_turn import SingleTurn

    released: list[bool] = []
    parts: Any = SimpleNamespace(
        workflow=SingleTurn(),
        benchmarks=SimpleNamespace(agents={"mvbench": object()}),
        start=SimpleNamespace(release=lambda: released.append(True)),
    )
    with pytest.raises(
        ConfigError, match="trainer.benchmarks: mvbench: a workflow answers rows in one process"
    ):
        _refuse_local_only(TrainConfig(), parts)
    assert released == [True]  # output_dir is free again
