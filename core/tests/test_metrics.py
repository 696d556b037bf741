"""Run records: metrics.jsonl without gap or duplicate across resumes, TensorBoard, metadata, progress."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from videorl.config import load_config
from videorl.errors import DataError, VideorlError
from videorl.plugins import load_plugins
from videorl.train.metrics import MetricsWriter, ProgressBar, git_revision, read_metrics, write_run_metadata


def _steps(path: Path) -> list[int]:
    return [row["step"] for row in read_metrics(path)]


def test_rows_are_flat_json_with_step_and_time(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path, tensorboard=False) as writer:
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
    with MetricsWriter(tmp_path, tensorboard=False) as writer:
        writer.log(1, {"x": 1})
        with pytest.raises(ValueError, match="step 3 logged after step 1"):
            writer.log(3, {"x": 1})
        with pytest.raises(ValueError, match="step 1 logged after step 1"):
            writer.log(1, {"x": 1})
        with pytest.raises(TypeError, match="metric 'y' has a value of type list"):
            writer.log(2, {"y": [1, 2]})


def test_resume_drops_lines_after_the_checkpoint(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path, tensorboard=False) as writer:
        for step in range(1, 6):
            writer.log(step, {"reward/overall": step / 10})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "rew')  # the run was killed while writing step 6
    # the last checkpoint was at step 3: steps 4 and 5 are trained (and logged) again
    with MetricsWriter(tmp_path, start_step=3, tensorboard=False) as writer:
        assert _steps(tmp_path / "metrics.jsonl") == [1, 2, 3]
        for step in range(4, 8):
            writer.log(step, {"reward/overall": 1.0})
    assert _steps(tmp_path / "metrics.jsonl") == [1, 2, 3, 4, 5, 6, 7]
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["reward/overall"] for r in rows] == [0.1, 0.2, 0.3, 1.0, 1.0, 1.0, 1.0]


def test_resume_past_the_end_of_the_metrics_is_an_error(tmp_path: Path) -> None:
    with MetricsWriter(tmp_path, tensorboard=False) as writer:
        writer.log(1, {"x": 1})
    with pytest.raises(VideorlError, match="ends at step 1, but the run resumes after step 3"):
        MetricsWriter(tmp_path, start_step=3, tensorboard=False)
    with MetricsWriter(tmp_path, start_step=0, tensorboard=False):  # a fresh run starts over
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

    with MetricsWriter(tmp_path) as writer:
        for step in (1, 2, 3):
            writer.log(step, {"reward/overall": float(step), "note": "text is not a scalar"})
    with MetricsWriter(tmp_path, start_step=2) as writer:
        writer.log(3, {"reward/overall": 30.0})
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert events.Tags()["scalars"] == ["reward/overall"]
    assert [(e.step, e.value) for e in events.Scalars("reward/overall")] == [(1, 1.0), (2, 2.0), (3, 30.0)]


def test_run_metadata(tmp_path: Path) -> None:
    config = load_config(None, ["model.path=/m", "data.train_files=[a.jsonl]", "seed=5"])
    plugins = load_plugins(entry_points=False)
    info = write_run_metadata(tmp_path / "run", config, plugins, argv=["videorl", "train", "c.yaml"])
    assert load_config(tmp_path / "run" / "config.yaml") == config
    requirements = (tmp_path / "run" / "requirements.txt").read_text().splitlines()
    assert requirements == plugins.requirements() and requirements[0].startswith("videorl==")
    stored = json.loads((tmp_path / "run" / "run.json").read_text())
    assert stored == info and stored["argv"] == ["videorl", "train", "c.yaml"]
    assert set(stored) >= {"videorl", "git", "started_at", "python", "packages"}


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
    with ProgressBar(10, start_step=2, file=out) as bar:
        bar.update(3, reward=0.5)
        bar.update(4, reward=0.625, acc=0.5)
    text = out.getvalue()
    assert "step 3/10" in text and "reward=0.500" in text
    assert "step 4/10" in text and "reward=0.625, acc=0.5" in text
    assert "<" in text  # elapsed<remaining
