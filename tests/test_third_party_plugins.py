"""Plugins as a stranger uses them: built into a wheel, installed, then used through the command line.

Each plugin (a contrib one, a project rendered from the cookiecutter template, or one written here)
is built into a wheel from a copy of its folder, installed with ``pip install --no-deps --target``
into a throwaway folder, and put on ``PYTHONPATH`` of ``videorl`` subprocesses that run with a fresh,
empty HOME, from a working directory of their own: nothing is imported from the source tree, and
nothing is left in the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTRIB = ROOT / "contrib"
LITTER = ("build", "*.egg-info", "__pycache__", ".pytest_cache")


def litter(folder: Path) -> list[str]:
    """What a build leaves in a source folder: build/ and *.egg-info anywhere in it."""
    return sorted(
        str(p.relative_to(folder)) for p in folder.rglob("*") if p.name == "build" or p.suffix == ".egg-info"
    )


def env_for(site: Path, tmp: Path) -> dict[str, str]:
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIDEORL_")}
    env.update(HOME=str(home), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    return env


def videorl(env: dict[str, str], cwd: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "videorl.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=600)  # fmt: skip
    if ok:
        assert proc.returncode == 0, (
            f"videorl {' '.join(args)}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def render(tmp: Path, kind: str, name: str) -> Path:
    from cookiecutter.main import cookiecutter

    out = cookiecutter(str(CONTRIB / "plugin-template"), no_input=True, output_dir=str(tmp / "rendered"),
                       extra_context={"plugin_name": name, "kind": kind})  # fmt: skip
    return Path(out)


# --- a benchmark rendered from the template ------------------------------------------------------


@pytest.mark.slow
def test_a_rendered_benchmark_evaluates_a_fixture_with_a_tiny_model(
    tmp_path: Path, install_plugin: Any
) -> None:
    from videorl.testing import write_test_video

    project = render(tmp_path, "benchmarks", "toy bench")
    env = env_for(install_plugin(project, tmp_path), tmp_path)
    work = tmp_path / "work"  # the evaluator runs elsewhere than the data: media paths must not be relative
    work.mkdir()
    data = tmp_path / "toy-bench"
    rows = [
        {"id": 1, "question": "Colour?", "options": ["red", "blue"], "answer": "A", "video": "videos/a.mp4"},
        {"id": 2, "question": "Count?", "options": ["1", "2"], "answer": "B", "video": "videos/b.mp4"},
    ]
    data.mkdir()
    (data / "annotations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for seed, row in enumerate(rows):
        write_test_video(data / row["video"], seed=seed)
    listed = {p["name"]: p for p in json.loads(videorl(env, work, "plugins", "--json").stdout)}
    assert listed["videorl-toy-bench"]["components"] == {"benchmarks": ["toy_bench"]}

    videorl(env, work, "models", "tiny", "qwen2_5_vl", "model")
    out = videorl(env, work, "eval", "run", "--model", "model", "--benchmark", "toy_bench", "--data-root",
                  str(data),
                  "--out", "run", "--cache-dir", "cache", "--max-tokens", "4", "--quiet")  # fmt: skip
    assert "toy_bench" in out.stdout
    summary = json.loads((work / "run" / "results.json").read_text())["benchmarks"]["toy_bench"]
    assert summary["n"] == 2 and summary["n_failed"] == 0, summary
    predictions = [json.loads(line) for line in (work / "run" / "toy_bench" / "predictions.jsonl").open()]
    assert sorted(p["id"] for p in predictions) == ["1", "2"] and not any(p.get("error") for p in predictions)


# --- the LLaVA-OneVision backend (contrib) -------------------------------------------------------


def _train_config(tmp: Path, model: Path, train: Path) -> Path:
    side = 56  # the demo's clips: 56×56, 4 frames at 2 fps
    config = {
        "seed": 0,
        "output_dir": str(tmp / "run"),
        "model": {"path": str(model), "dtype": "float32"},
        "data": {
            "train_files": [str(train)], "source_mode": "realtime_only", "video_fps": 2.0,
            "video_max_frames": 4,
            "video_min_pixels": side * side, "video_max_pixels": side * side, "max_prompt_length": 512,
            "rollout_batch_size": 2, "thinking": False,
        },
        "rollout": {"engine": "hf", "n": 2, "max_response_length": 4},
        "actor": {"global_batch_size": 2, "gradient_checkpointing": False},
        "trainer": {"max_steps": 2, "save_every": 2, "val_every": 0, "loggers": ["jsonl"],
                    "progress_bar": False},
    }  # fmt: skip
    path = tmp / "train.yaml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    return path


@pytest.mark.slow
def test_the_llava_backend_builds_a_tiny_model_and_trains_two_steps(
    tmp_path: Path, install_plugin: Any
) -> None:
    from videorl import demo

    env = env_for(install_plugin(CONTRIB / "videorl-models-llava-onevision", tmp_path), tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    listed = {p["name"]: p for p in json.loads(videorl(env, work, "plugins", "--json").stdout)}
    assert listed["videorl-models-llava-onevision"]["status"] == "ok"

    made = videorl(env, work, "models", "tiny", "llava_onevision", "model")
    assert made.stdout == "wrote a tiny llava_onevision checkpoint to model\n"
    train = demo.write_task(tmp_path / "data", 4, seed=0, split="train")
    videorl(env, work, "train", str(_train_config(tmp_path, work / "model", train)))
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(0.0 <= m["reward/overall"] <= 1.0 for m in metrics)
    assert "videorl-models-llava-onevision==0.1.0" in (tmp_path / "run" / "requirements.txt").read_text()


# --- a plugin whose reward takes a built-in name and alias ---------------------------------------

ACME = '''
"""A stranger's rewards: one takes the built-in name multiple_choice and its alias mc."""

from videorl.api import RewardOutput, hookimpl


class Choice:
    def __call__(self, inp):
        return RewardOutput(score=0.25)


class Parity:
    def __call__(self, inp):
        return RewardOutput(score=float(inp.response.strip().isdigit() and int(inp.response) % 2 == 0))


@hookimpl
def register_rewards(register):
    register("multiple_choice", "videorl_acme:Choice", aliases=["mc"])
    register("parity", "videorl_acme:Parity")
'''

ACME_PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "videorl-acme"
version = "0.3.0"

[project.entry-points.videorl]
videorl-acme = "videorl_acme"

[tool.setuptools]
py-modules = ["videorl_acme"]
"""


@pytest.fixture(scope="module")
def acme(tmp_path_factory: pytest.TempPathFactory, install_plugin: Any) -> tuple[dict[str, str], Path]:
    tmp = tmp_path_factory.mktemp("acme")
    project = tmp / "videorl-acme"
    project.mkdir()
    (project / "pyproject.toml").write_text(ACME_PYPROJECT)
    (project / "videorl_acme.py").write_text(textwrap.dedent(ACME))
    work = tmp / "work"
    work.mkdir()
    return env_for(install_plugin(project, tmp), tmp), work


COLLISION = (
    "reward 'multiple_choice' is registered twice: by distribution 'videorl-acme' (as 'multiple_choice') "
    "and by distribution 'videorl-rewards' (as 'multiple_choice')"
)


def test_a_collision_fails_only_the_colliding_reward(acme: tuple[dict[str, str], Path]) -> None:
    env, work = acme
    listed = {p["name"]: p for p in json.loads(videorl(env, work, "plugins", "--json").stdout)}
    for dist in ("videorl-rewards", "videorl-acme"):
        assert listed[dist]["status"] == "ok"
        conflicts = listed[dist]["conflicts"]
        assert len(conflicts) == 2 and COLLISION in conflicts[0]  # the name, then the alias
        assert conflicts[1].startswith("reward 'mc' is registered twice") and "videorl-acme" in conflicts[1]
    builtin = listed["videorl-rewards"]["components"]["rewards"]
    assert len(builtin) == 15 and "multiple_choice" in builtin

    def row(problem_type: str, answer: Any, response: str) -> dict[str, Any]:
        return {"id": problem_type, "problem_type": problem_type, "answer": answer, "response": response}

    rows = [
        row("numerical", "3", "<answer>3</answer>"),
        row("number", "2.5", "<answer>2.5</answer>"),  # an alias of a built-in that does not collide
        row("temporal_grounding", [1.0, 3.0], "<answer>[1.0, 3.0]</answer>"),
        row("boolean", "yes", "<answer>yes</answer>"),
        row("parity", "", "4"),  # the stranger's other reward
        row("mc", "A", "<answer>A</answer>"),
        row("multiple choice", "A", "<answer>A</answer>"),
    ]
    (work / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = videorl(
        env, work, "reward", "--input", "rows.jsonl", "--output", "scored.jsonl", "--workers", "1", ok=False
    )
    scored = {r["id"]: r["scores"] for r in map(json.loads, (work / "scored.jsonl").open())}
    assert scored == {
        "numerical": [1.0],
        "number": [1.0],
        "temporal_grounding": [1.0],
        "boolean": [1.0],
        "parity": [1.0],
    }
    report = result.stdout + result.stderr
    assert report.count(COLLISION) >= 1 and "VIDEORL_DISABLE_PLUGINS=videorl-acme" in report, report
    assert "has no reward" not in report


def test_with_strict_plugins_a_collision_stops_the_start(acme: tuple[dict[str, str], Path]) -> None:
    env, work = acme
    result = videorl(env, work, "--strict-plugins", "plugins", ok=False)
    assert result.returncode == 2 and COLLISION in result.stderr, result.stderr
    disabled = videorl(env, work, "--strict-plugins", "--disable-plugin", "videorl-acme", "plugins", "--json")
    listed = {p["name"]: p for p in json.loads(disabled.stdout)}
    assert listed["videorl-acme"]["status"] == "disabled" and listed["videorl-rewards"]["conflicts"] == []


# --- installing a plugin folder leaves it as it was ----------------------------------------------


@pytest.mark.parametrize("plugin", ["videorl-models-llava-onevision", "videorl-reward-counting", "template"])
def test_pip_install_of_a_plugin_folder_writes_nothing_into_it(tmp_path: Path, plugin: str) -> None:
    if plugin == "template":
        folder = render(tmp_path, "rewards", "shot count")
    else:  # a copy stands in for the checkout, so that a regression leaves the real one clean
        folder = tmp_path / "checkout" / plugin
        shutil.copytree(CONTRIB / plugin, folder, ignore=shutil.ignore_patterns(*LITTER))
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "--target", str(site), str(folder)],
                   check=True, capture_output=True)  # fmt: skip
    assert litter(folder) == []
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before
    (dist_info,) = site.glob("videorl_*.dist-info")
    assert (dist_info / "entry_points.txt").read_text().startswith("[videorl]\n")


# --- a tracker installed as a package (register_loggers) -----------------------------------------

LITE = '''
"""A stranger's experiment tracker: every row and summary as a line of RUN/lite.jsonl."""

import json

from videorl.api import hookimpl


class LiteLogger:
    def __init__(self, run, *, tag="none"):
        self.path = run.run_dir / "lite.jsonl"
        self.write({"open": run.kind, "tag": tag, "requirements": run.metadata["requirements"],
                    "model": run.config["model"]["path"]})

    def write(self, item):
        with open(self.path, "a") as f:
            f.write(json.dumps(item) + "\\n")

    def log(self, step, row):
        self.write({"step": step, **row})

    def log_summary(self, summary):
        self.write({"summary": dict(summary)})

    def close(self):
        self.write({"close": True})


@hookimpl
def register_loggers(register):
    register("lite", LiteLogger)
'''


@pytest.mark.slow
def test_a_tracker_installed_as_a_package_logs_an_evaluation(tmp_path: Path, install_plugin: Any) -> None:
    project = tmp_path / "videorl-lite"
    project.mkdir()
    (project / "pyproject.toml").write_text(ACME_PYPROJECT.replace("acme", "lite").replace("0.3.0", "0.2.0"))
    (project / "videorl_lite.py").write_text(textwrap.dedent(LITE))
    env = env_for(install_plugin(project, tmp_path), tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    listed = {p["name"]: p for p in json.loads(videorl(env, work, "plugins", "--json").stdout)}
    assert listed["videorl-lite"]["components"] == {"loggers": ["lite"]}

    videorl(env, work, "models", "tiny", "qwen2_5_vl", "model")
    data = tmp_path / "mvbench"
    (data / "json").mkdir(parents=True)
    row = {"video": "absent.mp4", "question": "Is it there?", "candidates": ["yes", "no"], "answer": "yes"}
    (data / "json" / "object_existence.json").write_text(json.dumps([row]))
    videorl(env, work, "eval", "run", "--model", "model", "--benchmark", "mvbench", "--data-root", str(data),
            "--out", "run", "--max-tokens", "2", "--quiet", "--logger", "lite", "--logger-option",
            "lite.tag=t1")  # fmt: skip
    lines = [json.loads(line) for line in (work / "run" / "lite.jsonl").read_text().splitlines()]
    assert [next(iter(item)) for item in lines] == ["open", "summary", "close"]
    assert lines[0]["open"] == "eval" and lines[0]["tag"] == "t1"
    assert "videorl-lite==0.2.0" in lines[0]["requirements"]
    assert lines[0]["model"] == str((work / "model").resolve())
    summary = json.loads((work / "run" / "results.json").read_text())["benchmarks"]["mvbench"]
    figures = lines[1]["summary"]
    assert figures["mvbench/overall"] == summary["overall"] and figures["mvbench/n"] == 1
