"""Run records: metrics.jsonl without gap or duplicate across resumes, TensorBoard, metadata, progress."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from videorl.config import load_config
from videorl.errors import DataError, VideorlError
from videorl.plugins import load_plugins
from videorl.runs.history import git_revision, read_metrics
from videorl.runs.records import CompletionLog, MetricsWriter, ProgressBar, write_run_metadata
from videorl.runs.trackers import JsonlLogger, RunContext, TensorBoardLogger


def _steps(path: Path) -> list[int]:
    return [row["step"] for row in read_metrics(path)]


def test_rows_are_flat_json_with_step_and_time(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path) as writer:
        row = writer.log(
            1,
            {
                "reward": {"overall": torch.tensor(0.25), "multiple_choice": 0.5},
                "actor/kl": float("nan"),
                "note": "warm-up",
            },
        )
    assert row["step"] == 1 and isinstance(row["time"], float)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 1
    stored = json.loads(lines[0])
    assert {k: v for k, v in stored.items() if k != "time"} == {
        "step": 1,
        "reward/overall": 0.25,
        "reward/multiple_choice": 0.5,
        "actor/kl": None,
        "note": "warm-up",
    }


def test_steps_must_follow_each_other(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path) as writer:
        writer.log(1, {"x": 1})
        with pytest.raises(ValueError, match="step 3 logged after step 1"):
            writer.log(3, {"x": 1})
        with pytest.raises(ValueError, match="step 1 logged after step 1"):
            writer.log(1, {"x": 1})
        with pytest.raises(TypeError, match="metric 'y' has a value of type list"):
            writer.log(2, {"y": [1, 2]})


def test_resume_drops_lines_after_the_checkpoint(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path) as writer:
        for step in range(1, 6):
            writer.log(step, {"reward/overall": step / 10})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "rew')  # the run was killed while writing step 6
    # the last checkpoint was at step 3: steps 4 and 5 are trained (and logged) again
    with MetricsWriter(tmp_path, start_step=3) as writer:
        assert _steps(tmp_path / "metrics.jsonl") == [1, 2, 3]
        for step in range(4, 8):
            writer.log(step, {"reward/overall": 1.0})
    assert _steps(tmp_path / "metrics.jsonl") == [1, 2, 3, 4, 5, 6, 7]
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["reward/overall"] for r in rows] == [0.1, 0.2, 0.3, 1.0, 1.0, 1.0, 1.0]


def test_resume_past_the_end_of_the_metrics_is_an_error(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path) as writer:
        writer.log(1, {"x": 1})
    with pytest.raises(VideorlError, match="ends at step 1, but the run resumes after step 3"):
        MetricsWriter(tmp_path, start_step=3)
    with MetricsWriter(tmp_path, start_step=0):  # a fresh run starts over
        assert _steps(tmp_path / "metrics.jsonl") == []


def test_malformed_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(DataError, match=r"metrics.jsonl:2: not a JSON object"):
        read_metrics(path)
    path.write_text('{"step": 1}\n{"step": "2"}\n')
    with pytest.raises(DataError, match=r"metrics.jsonl:2: .* integer 'step'"):
        read_metrics(path)


def test_tensorboard_scalars_survive_a_resume(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def writer(start: int) -> MetricsWriter:
        run = RunContext(tmp_path, start_step=start)
        return MetricsWriter(
            tmp_path, start_step=start, loggers={"jsonl": JsonlLogger(run), "tb": TensorBoardLogger(run)}
        )

    with writer(0) as w:
        for step in (1, 2, 3):
            w.log(step, {"reward/overall": float(step), "note": "text is not a scalar"})
    with writer(2) as w:
        w.log(3, {"reward/overall": 30.0})
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert events.Tags()["scalars"] == ["reward/overall"]
    assert [(e.step, e.value) for e in events.Scalars("reward/overall")] == [(1, 1.0), (2, 2.0), (3, 30.0)]


def test_run_metadata(tmp_path: Path) -> None:
    config = load_config(None, ["model.path=/m", f"data.train_files=[{tmp_path / 'a.jsonl'}]", "seed=5",
                                f"output_dir={tmp_path / 'run'}"])  # fmt: skip
    plugins = load_plugins(entry_points=False)
    info = write_run_metadata(tmp_path / "run", config, plugins, argv=["videorl", "train", "c.yaml"])
    assert load_config(tmp_path / "run" / "config.yaml") == config
    requirements = (tmp_path / "run" / "requirements.txt").read_text().splitlines()
    assert requirements == plugins.requirements() and requirements[0].startswith("videorl==")
    stored = json.loads((tmp_path / "run" / "run.json").read_text())
    assert stored == info and stored["argv"] == ["videorl", "train", "c.yaml"]
    assert set(stored) >= {"videorl", "git", "started_at", "python", "packages"}
    assert stored["plugins"] == []  # no plugin without a distribution
    # the default vllm engine samples from its own seed (seed + rank), with no per-request seeds
    assert stored["sampling_seed"] == {"engine_seed": "5 + rank", "per_request_seeds": False}
    opted = load_config(None, ["model.path=/m", f"data.train_files=[{tmp_path / 'a.jsonl'}]",
                               "rollout.engine_options={per_request_seeds: true}"])  # fmt: skip
    again = write_run_metadata(tmp_path / "opted", opted, plugins)
    assert again["sampling_seed"] == {"engine_seed": "1 + rank", "per_request_seeds": True}


def test_run_metadata_records_plugin_modules_with_their_file_and_digest(tmp_path: Path) -> None:
    import hashlib

    from videorl.runs.plugins import load_run_plugins

    source = (
        "from videorl.api import hookimpl\n\n@hookimpl\ndef register_rewards(register):\n    register('one', "
        "lambda inp: 1.0)\n"
    )
    (tmp_path / "quick_metadata_reward.py").write_text(source)
    plugins = load_run_plugins(["quick_metadata_reward.py"], base=tmp_path)
    assert "one" in plugins.rewards
    config = load_config(None, ["model.path=/m", "data.train_files=[a.jsonl]"])
    info = write_run_metadata(tmp_path / "run", config, plugins)
    assert info["plugins"] == [{
        "name": "quick_metadata_reward", "status": "ok", "file": str(tmp_path / "quick_metadata_reward.py"),
        "sha256": hashlib.sha256(source.encode()).hexdigest(),
    }]  # fmt: skip


class _Completion:
    def __init__(self, ids: list[int]) -> None:
        self.token_ids, self.finish_reason = ids, "stop"


def _trajectory(group: int, ids: list[int], *, offline: bool = False) -> Any:
    from types import SimpleNamespace

    from videorl.data import Sample

    sample = Sample(id=f"s{group}", data_type="text", problem="Q", problem_type="mc", ground_truth="A")
    return SimpleNamespace(prompt=SimpleNamespace(sample=sample), group=group, completion=_Completion(ids),
                           offline=offline, reward=0.5, parts={"format": 1.0})  # fmt: skip


def test_completion_log_takes_one_response_per_prompt_first_and_resumes(tmp_path: Path) -> None:
    batch = [_trajectory(0, [1]), _trajectory(0, [2]), _trajectory(1, [3]), _trajectory(1, [4], offline=True)]
    decode = lambda ids: "".join(chr(96 + i) for i in ids)  # noqa: E731
    log = CompletionLog(tmp_path, 3)
    rows = log.log(1, batch, decode)
    assert [(r["sample_id"], r["response"], r["offline"]) for r in rows] == [
        ("s0", "a", False), ("s1", "c", False), ("s0", "b", False)
    ]  # fmt: skip
    assert rows[0] == {"step": 1, "sample_id": "s0", "problem_type": "mc", "problem": "Q",
                       "ground_truth": "A",
                       "response": "a", "reward": 0.5, "parts": {"format": 1.0}, "offline": False,
                       "finish_reason": "stop"}  # fmt: skip
    log.log(2, batch, decode)
    CompletionLog(tmp_path, 3, start_step=1)  # resumed after step 1: step 2 is logged again
    assert [r["step"] for r in read_metrics(tmp_path / "completions.jsonl")] == [1, 1, 1]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_revision(tmp_path: Path) -> None:
    assert git_revision(tmp_path) is None  # not a checkout
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
        ).stdout

    git("init", "-q")
    (repo / "a.txt").write_text("1")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    sha = git("rev-parse", "HEAD").strip()
    assert git_revision(repo) == {"revision": sha, "dirty": False}
    (repo / "a.txt").write_text("2")
    assert git_revision(repo) == {"revision": sha, "dirty": True}
    info = write_run_metadata(
        tmp_path / "run", load_config(None, ["model.path=/m", "data.train_files=[a]"]), source_dir=repo
    )
    assert info["git"] == {"revision": sha, "dirty": True}
    assert not (tmp_path / "run" / "requirements.txt").exists()  # no plugins object given


def test_progress_bar_shows_step_reward_and_eta() -> None:
    out = io.StringIO()
    with ProgressBar(10, start_step=2, file=out, terminal=True) as bar:
        bar.update(3, reward=0.5)
        bar.update(4, reward=0.625, acc=0.5)
    text = out.getvalue()
    assert "step 3/10" in text and "reward=0.500" in text
    assert "step 4/10" in text and "reward=0.625, acc=0.5" in text
    assert "<" in text  # elapsed<remaining


def test_in_a_file_the_progress_is_one_line_per_step() -> None:
    """A log file (stderr not a terminal) gets a line per step, with no carriage returns."""
    out = io.StringIO()
    assert not out.isatty()
    with ProgressBar(10, start_step=2, file=out) as bar:
        bar.stage("rollout 16 prompts × 8")  # nothing: the step's line comes when it ends
        bar.update(3, reward=0.5, stages={"rollout": 1.25, "actor": 2.0}, acc=0.25)
        bar.update(4, reward=0.625, acc=0.5)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and len(lines) == 2
    assert (
        lines[0].startswith("step 3/10  ")
        and "reward 0.500  acc 0.25  rollout 1.2 s  actor 2.0 s" in lines[0]
    )
    assert lines[1].startswith("step 4/10  ") and lines[1].endswith("reward 0.625  acc 0.5")
