"""examples/: every config loads, the dataset covers every problem type and kind of sample, the demo's
config file is the demo's job, the small CPU config trains 2 steps (and resumes after its run directory
is moved), and every example the docs name exists."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from videorl.config import load_config

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
CONFIGS = sorted(EXAMPLES.glob("*.yaml"))


def test_every_example_config_loads() -> None:
    assert {c.name for c in CONFIGS} == {
        "demo.yaml",
        "cpu-small.yaml",
        "gpu-single.yaml",
        "multi-node.yaml",
        "long-video.yaml",
    }
    for path in CONFIGS:
        config = load_config(path)
        assert Path(config.output_dir).is_absolute(), path  # resolved against examples/, not the cwd
    small = load_config(EXAMPLES / "cpu-small.yaml")
    assert small.data.train_files == [str(EXAMPLES / "data" / "train.jsonl")]
    assert small.model.path == str(ROOT / "runs" / "tiny-qwen2_5_vl")
    seed = load_config(EXAMPLES / "multi-node.yaml")
    assert (seed.data.rollout_batch_size, seed.rollout.n, seed.rollout.max_response_length) == (256, 8, 4096)
    assert (seed.ray.placement, seed.ray.actor_workers, seed.ray.rollout_workers) == ("split", 16, 8)


def test_the_long_video_example_shards_an_hour_over_8_ranks_and_derives_the_engine_context() -> None:
    from videorl.rollout.factory import max_model_len

    config = load_config(EXAMPLES / "long-video.yaml")
    assert config.actor.sequence_parallel_size == 8 and config.actor.gradient_checkpointing
    assert (config.data.video_max_frames, config.data.video_fps, config.data.video_max_pixels) == (
        3600,
        1.0,
        308**2,
    )
    assert max_model_len(config) == 233_000 + 1_024  # the prompt limit and a full response
    # 8 ranks make one data group: its 8 prompts all go to the group's first rank
    assert config.data.rollout_batch_size == config.actor.global_batch_size == 8


def test_demo_yaml_is_the_demos_job() -> None:
    from videorl import demo

    out = ROOT / "runs" / "demo"
    overrides = demo.demo_overrides(
        out, out / "model", out / "train.jsonl", out / "val.jsonl", steps=150, seed=0, engine="hf"
    )
    assert load_config(EXAMPLES / "demo.yaml") == load_config(None, overrides)


def test_the_dataset_has_every_problem_type_and_kind_of_sample(tmp_path: Path) -> None:
    from videorl.data import load_samples
    from videorl.plugins import load_plugins

    rewards = load_plugins().rewards
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(EXAMPLES / "data" / "train.jsonl", data)
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "make_media.py"), "--out", str(data)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    samples = load_samples(data / "train.jsonl", problem_types=rewards)
    first_party = {e.name for e in rewards.entries() if e.origin == "videorl-rewards"}
    assert len(first_party) == 15
    assert {rewards.canonical(s.problem_type) for s in samples} == first_party
    kinds = {(s.data_type, len(s.videos), len(s.images)) for s in samples}
    assert {("video", 1, 0), ("video", 2, 0), ("image", 0, 1), ("text", 0, 0)} <= kinds
    for s in samples:
        for media in [*s.videos, *s.images]:
            assert Path(media).is_file(), (s.id, media)  # make_media.py writes every file a row names


def _train(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "videorl.cli", "train", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


@pytest.mark.slow
def test_the_small_cpu_example_trains_and_resumes_after_its_run_moves(tmp_path: Path, tiny_model_dir) -> None:
    run = tmp_path / "run"
    done = _train(
        str(EXAMPLES / "cpu-small.yaml"),
        f"model.path={tiny_model_dir('qwen2_5_vl')}",
        f"data.train_files=[{_example_data(tmp_path)}]",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"output_dir={run}",
        "trainer.progress_bar=false",
    )
    assert done.returncode == 0, done.stderr[-4000:]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    # 8 rows per step over 16 rows: every problem type's template and reward ran once in the two steps
    seen = {k for m in metrics for k in m if k.startswith("reward/") and k != "reward/overall"}
    assert len(seen) == 15, sorted(seen)

    moved = tmp_path / "elsewhere" / "moved-run"
    moved.parent.mkdir()
    shutil.move(run, moved)
    done = _train(
        str(moved / "config.yaml"), "--resume", "auto", "trainer.max_steps=3", "trainer.progress_bar=false"
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert f"run directory: {moved}" in done.stdout
    metrics = [json.loads(line) for line in (moved / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert not run.exists()


def _example_data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(EXAMPLES / "data" / "train.jsonl", data)
    subprocess.run(
        [sys.executable, str(EXAMPLES / "make_media.py"), "--out", str(data)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return data / "train.jsonl"


@pytest.mark.slow
def test_a_batch_larger_than_the_data_warns_and_a_step_shows_its_stages(
    tmp_path: Path, tiny_model_dir
) -> None:
    """32 prompts per step over 16 rows: a warning with the numbers, on a line of its own; stderr is a
    file here (not a terminal), so the progress is one line per step with its stage times, never a
    bar redrawn with carriage returns."""
    done = _train(
        str(EXAMPLES / "cpu-small.yaml"),
        f"model.path={tiny_model_dir('qwen2_5_vl')}",
        f"data.train_files=[{_example_data(tmp_path)}]",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"output_dir={tmp_path / 'run'}",
        "data.rollout_batch_size=32",
        "actor.global_batch_size=16",
        "trainer.max_steps=2",
        "trainer.progress_bar=true",
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert (
        "data.rollout_batch_size is 32 but the training data has 16 samples: each step repeats every "
        "sample about 2× (32 prompts × 4 responses = 128 per step)"
    ) in done.stderr
    assert "\r" not in done.stderr
    steps = [line for line in done.stderr.splitlines() if line.startswith("step ")]
    assert [line.split("  ")[0] for line in steps] == ["step 1/2", "step 2/2"]
    for line in steps:
        assert " s  reward " in line and "  rollout " in line and "  actor " in line, line


@pytest.mark.slow
def test_a_start_that_fails_leaves_no_run_directory(tmp_path: Path, tiny_model_dir) -> None:
    train = _example_data(tmp_path)
    runs = tmp_path / "runs"
    for bad in (
        [f"model.path={tmp_path / 'no-model'}"],
        [f"data.train_files=[{tmp_path / 'missing.jsonl'}]"],
        ["rollout.n=0"],
    ):
        done = _train(
            str(EXAMPLES / "cpu-small.yaml"),
            f"model.path={tiny_model_dir('qwen2_5_vl')}",
            f"data.train_files=[{train}]",
            f"data.cache_dir={tmp_path / 'cache'}",
            *bad,
            f"output_dir={runs / 'first'}",
        )
        assert done.returncode != 0 and "Error: " in done.stderr and "Traceback" not in done.stderr, bad
        assert not runs.exists(), (bad, sorted(runs.rglob("*")))


def test_every_example_the_docs_name_exists() -> None:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), EXAMPLES / "README.md"]
    named = 0
    for doc in docs:
        text = doc.read_text(encoding="utf-8")
        for match in re.finditer(r"(?<![\w/.-])examples/[\w./-]*\w", text):
            assert (ROOT / match.group(0)).exists(), (doc, match.group(0))
            named += 1
        # a config a command trains from is a file in the repository, or a placeholder in capitals
        for match in re.finditer(r"videorl train (\S+\.ya?ml)", text):
            name = match.group(1)
            assert name.isupper() or name.startswith(("my-", "MOVED/", "RUN/")) or (ROOT / name).is_file(), (
                doc,
                name,
            )
    assert named >= 4


#: an example's claim that it fits: `videorl plan examples/NAME.yaml ARGS   # fits` in its comments
PLAN_CLAIM = re.compile(r"^#\s+videorl plan examples/(?P<name>[\w.-]+\.yaml) (?P<args>[^#]+?)\s+# fits\s*$")


def test_every_example_is_planned_and_its_claimed_fits_hold(tmp_path: Path) -> None:
    """`videorl plan` runs on every example; where the example's comments claim a fit (the GPU
    examples, with the public shape of their model), the plan must agree."""
    from click.testing import CliRunner

    from videorl.cli import make_cli
    from videorl.plugins import load_plugins
    from videorl_models.tiny import build_tiny

    plugins = load_plugins()
    cli = make_cli(plugins)
    tiny = build_tiny("qwen2_5_vl", tmp_path / "tiny", seed=0)
    claims = 0
    for path in CONFIGS:
        lines = [PLAN_CLAIM.match(line) for line in path.read_text().splitlines()]
        mine = [m for m in lines if m is not None]
        assert all(m["name"] == path.name for m in mine), path  # a claim names its own file
        runs = [m["args"].split() for m in mine] or [
            ["--gpus", "1", "--gpu-memory", "80", f"model.path={tiny}"]
        ]
        for args in runs:
            done = CliRunner().invoke(cli, ["plan", str(path), *args], obj=plugins)
            assert done.exit_code == 0, (path.name, done.output)
            if mine:
                claims += 1
                assert done.output.splitlines()[-1] == "fits", (
                    f"{path.name} claims a fit that plan denies:\n{done.output}"
                )
    assert claims >= 2  # gpu-single.yaml and multi-node.yaml
