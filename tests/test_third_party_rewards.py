"""A stranger's rewards train through the CLI: installed as a user installs them, or named in the config.

Each plugin is built into a wheel from a copy of its folder (nothing is written into the checkout) and
``pip install --target``-ed into a throwaway folder put on the PYTHONPATH of a ``videorl train``
subprocess, which runs 2 steps on the demo's tiny model with a dataset whose problem types only the
plugin serves: by name, by alias and through ``rewards.routes``. The quick path needs no package at all:
``plugins: [my_reward.py]`` in the config, with plain functions as rewards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from videorl import demo
from videorl.plugins import load_plugins
from videorl.runs.history import read_metrics

ROOT = Path(__file__).resolve().parents[1]
CONTRIB = ROOT / "contrib"


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    out = tmp_path_factory.mktemp("task")
    model, train, val = demo.prepare(out, load_plugins(), family="qwen2_5_vl", seed=0, train=2, val=1)
    return out, model, train, val


def _rows(task: tuple[Path, Path, Path, Path], path: Path, rows: list[dict[str, Any]]) -> Path:
    """The task's clips as rows of other problem types (``rows`` give the fields that differ)."""
    _, _, train, _ = task
    clips = [json.loads(line) for line in train.read_text().splitlines()]
    out = []
    for i, fields in enumerate(rows):
        clip = clips[i % len(clips)]
        out.append(
            {
                "id": f"row-{i}",
                "data_type": "video",
                "videos": [str(train.parent / clip["videos"][0])],
                **fields,
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in out))
    return path


def _train(
    task: tuple[Path, Path, Path, Path],
    config: Path,
    run: Path,
    data: Path,
    target: Path | None = None,
    *extra: str,
) -> subprocess.CompletedProcess[str]:
    """``videorl train CONFIG`` for 2 steps in a subprocess with an empty HOME (and ``target`` on
    its path)."""
    out, model, train, val = task
    overrides = [
        *demo.demo_overrides(out, model, train, val, steps=2, seed=3, engine="hf"),
        f"output_dir={run}",
        f"data.train_files=[{data}]",
        "data.val_files=[]",
        "data.prompt_template=null",
        "data.rollout_batch_size=2",
        "actor.global_batch_size=2",
        "rollout.n=4",
        "trainer.val_every=0",
        "trainer.progress_bar=false",
        "trainer.save_every=0",
        "trainer.log_completions=8",
        *extra,
    ]
    home = run.parent / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIDEORL_")}
    env.update(HOME=str(home), OMP_NUM_THREADS="1")
    if target is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), env.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-m", "videorl.cli", "train", str(config), *overrides],
        capture_output=True,
        text=True,
        env=env,
        cwd=run.parent,
    )


def _completions(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "completions.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_the_contrib_counting_plugin_trains_by_alias_and_by_route(
    task: Any, tmp_path: Path, install_plugin: Any
) -> None:
    target = install_plugin(CONTRIB / "videorl-reward-counting", tmp_path)
    data = _rows(task, tmp_path / "count.jsonl", [
        {"problem_type": "object counting", "problem": "How many squares are there?", "answer": "1",
         "offline_output": "<answer>1</answer>"},  # an alias the plugin registers
        {"problem_type": "tally", "problem": "How many squares move?", "answer": 1,
         "offline_output": "<answer>one</answer>"},  # routed to the plugin's reward below
    ])  # fmt: skip
    config = tmp_path / "train.yaml"
    config.write_text("rewards:\n  routes:\n    tally: counting\n")
    run = tmp_path / "run"
    done = _train(task, config, run, data, target)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for key in (
        "reward/counting",
        "reward/tally",
        "parts/counting/accuracy",
        "parts/counting/format",
        "parts/tally/format",
    ):
        assert key in rows[1], key
    logged = _completions(run)
    assert {r["step"] for r in logged} == {1, 2} and len(logged) == 16
    offline = [r for r in logged if r["offline"]]  # the offline answers parse: the plugin's own part is there
    assert offline and all(r["parts"] == {"accuracy": 1.0, "format": 1.0, "abs_error": 0.0} for r in offline)
    assert "videorl-reward-counting==0.1.0" in (run / "requirements.txt").read_text()


@pytest.mark.slow
def test_a_rendered_cookiecutter_reward_plugin_trains(task: Any, tmp_path: Path, install_plugin: Any) -> None:
    from cookiecutter.main import cookiecutter

    rendered = Path(
        cookiecutter(
            str(CONTRIB / "plugin-template"),
            no_input=True,
            output_dir=str(tmp_path / "new"),
            extra_context={"plugin_name": "shot colour", "kind": "rewards"},
        )
    )
    target = install_plugin(rendered, tmp_path)
    data = _rows(task, tmp_path / "colour.jsonl", [
        {"problem_type": "shot colour", "problem": "What colour is the square?", "answer": "red",
         "offline_output": "<answer>Red</answer>"},
        {"problem_type": "shot_colour", "problem": "What colour is the square?", "answer": "blue",
         "offline_output": "<answer>blue</answer>"},
    ])  # fmt: skip
    config = tmp_path / "train.yaml"
    config.write_text("")
    run = tmp_path / "run"
    done = _train(task, config, run, data, target, "data.thinking=true")  # the template's thinking variant
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert {"reward/shot_colour", "parts/shot_colour/accuracy"} <= set(rows[0])
    assert not any(k.startswith("reward/shot colour") for k in rows[0])  # one series for both spellings


QUICK_REWARD = '''
"""Quick rewards for one experiment: plain functions, no package."""

from videorl.api import PromptTemplate, RewardInput, RewardOutput, hookimpl


def even_length(inp: RewardInput) -> float:
    return 1.0 if len(inp.response) % 2 == 0 else 0.0


def short(inp: RewardInput) -> RewardOutput:
    return RewardOutput(1.0 / (1 + len(inp.response)), {"chars": float(len(inp.response))})


@hookimpl
def register_rewards(register):
    register("even_length", even_length)
    register("short", short)


@hookimpl
def register_prompt_templates(register):
    for name in ("even_length", "short"):
        register(name, PromptTemplate(name, "{{ problem }} Answer briefly."))
        register(name + "/thinking", PromptTemplate(name, "{{ problem }} Think, then answer briefly."))
'''


@pytest.mark.slow
def test_a_config_plugins_file_with_plain_function_rewards_trains(task: Any, tmp_path: Path) -> None:
    (tmp_path / "my_reward.py").write_text(QUICK_REWARD)
    data = _rows(task, tmp_path / "quick.jsonl", [
        {"problem_type": "even_length", "problem": "Say something.", "answer": "anything"},
        {"problem_type": "short", "problem": "Say little.", "answer": "anything"},
    ])  # fmt: skip
    config = tmp_path / "train.yaml"
    config.write_text("plugins: [my_reward.py]\n")  # relative to the config file
    run = tmp_path / "run"
    done = _train(task, config, run, data)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert {"reward/even_length", "reward/short", "parts/short/chars"} <= set(rows[0])
    logged = [r for r in _completions(run) if r["problem_type"] == "short" and not r["offline"]]
    assert logged and all(r["parts"]["chars"] == len(r["response"]) for r in logged)
    assert all(r["reward"] in (0.0, 1.0) for r in _completions(run) if r["problem_type"] == "even_length")
    recorded = json.loads((run / "run.json").read_text())["plugins"]
    assert [(p["name"], p["file"], p["status"]) for p in recorded] == [
        ("my_reward", str(tmp_path / "my_reward.py"), "ok")
    ]
    assert len(recorded[0]["sha256"]) == 64


@pytest.mark.slow
def test_a_plugins_override_is_relative_to_the_working_directory(task: Any, tmp_path: Path) -> None:
    """``plugins=[...]`` on the command line is the CWD's, like every other path given as an override."""
    (tmp_path / "quick").mkdir()
    (tmp_path / "quick" / "my_reward.py").write_text(QUICK_REWARD)
    (tmp_path / "conf").mkdir()
    config = tmp_path / "conf" / "train.yaml"  # another folder than the plugin's and the CWD (tmp_path)
    config.write_text("")
    data = _rows(task, tmp_path / "quick.jsonl", [{"problem_type": "short", "problem": "Q", "answer": "x"}])
    run = tmp_path / "run"
    done = _train(task, config, run, data, None, "plugins=[quick/my_reward.py]")
    assert done.returncode == 0, done.stderr[-3000:]
    recorded = json.loads((run / "run.json").read_text())["plugins"]
    assert [(p["name"], p["file"]) for p in recorded] == [
        ("my_reward", str(tmp_path / "quick" / "my_reward.py"))
    ]


def test_a_config_plugin_that_does_not_import_is_named(task: Any, tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("import not_a_module_anywhere\n")
    data = _rows(
        task,
        tmp_path / "d.jsonl",
        [{"problem_type": "multiple choice", "problem": "Q", "answer": "A", "options": ["A. x", "B. y"]}],
    )
    config = tmp_path / "train.yaml"
    config.write_text("plugins: [broken.py, missing.py]\n")
    done = _train(task, config, tmp_path / "run", data)
    assert done.returncode == 1
    assert (
        f"plugins: {tmp_path / 'broken.py'}: the plugin module could not be imported: ModuleNotFoundError: "
        "No module named 'not_a_module_anywhere'"
    ) in done.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
