"""The plugin is installed, registered, and keeps the videorl contract."""

from __future__ import annotations

import json
from typing import Any

{% if cookiecutter.kind == "rewards" %}
from videorl.api import RewardInput
from videorl.testing import assert_reward_contract

from videorl_{{ cookiecutter.underscored }}.reward import ExactAnswerReward


def test_plugin_is_installed(run_cli: Any) -> None:
    plugins = {p["name"]: p for p in run_cli("plugins", "--json").assert_success().json()}
    entry = plugins["videorl-{{ cookiecutter.hyphenated }}"]
    assert entry["status"] == "ok"
    assert entry["components"] == {
        "prompt_templates": ["{{ cookiecutter.underscored }}", "{{ cookiecutter.underscored }}/thinking"],
        "rewards": ["{{ cookiecutter.underscored }}"],
    }


def test_reward_contract() -> None:
    def case(response: str) -> RewardInput:
        return RewardInput(response=response, problem_type="{{ cookiecutter.underscored }}", ground_truth="Red")

    assert_reward_contract(
        ExactAnswerReward(),
        [
            (case("<answer>red</answer>"), 1.0),
            (case("<answer>blue</answer><answer> RED </answer>"), 1.0),
            (case("<answer>red</answer><answer>blue</answer>"), 0.0),
            (case("< Answer > red </ANSWER>"), 1.0),  # tag spelling repaired
            (case("<answer>dark red</answer>"), 0.0),
            (case("red"), 0.0),  # untagged
        ],
    )


def test_prompt_templates_serve_both_variants_and_every_spelling(videorl_plugins: Any) -> None:
    from videorl.api import render_prompt

    from videorl_{{ cookiecutter.underscored }} import plugin

    templates = videorl_plugins(plugin).prompt_templates
    for spelling in ["{{ cookiecutter.underscored }}", *plugin.ALIASES]:
        sample = {"problem": "What colour is the ball?", "problem_type": spelling}
        plain = render_prompt(templates, sample, thinking=False)
        assert plain == (
            "What colour is the ball?\n\nGive only your answer between <answer> and </answer>, and nothing else."
        )
        thinking = render_prompt(templates, {**sample, "options": ["A. red", "B. blue"]}, thinking=True)
        assert thinking.startswith("What colour is the ball?\n\nOptions:\nA. red\nB. blue\n\nFirst think")
{% else %}
from pathlib import Path

import pytest

from videorl.testing import assert_benchmark_contract, write_test_video

from videorl_{{ cookiecutter.underscored }}.benchmark import JsonlBenchmark

NAME = "{{ cookiecutter.underscored }}"
ROWS = [
    {"id": 1, "question": "Colour?", "options": ["red", "blue"], "answer": "A", "category": "colour", "video": "videos/a.mp4"},
    {"id": 2, "question": "Count?", "options": ["1", "2"], "answer": "B", "category": "count", "video": "videos/b.mp4"},
    {"id": 3, "question": "Colour?", "options": ["red", "blue"], "answer": "B", "category": "colour", "video": "videos/a.mp4"},
]


def write_fixture(root: Path) -> Path:
    """A tiny copy of the benchmark in its own format: annotations.jsonl and the clips it names."""
    root.mkdir(parents=True)
    (root / "annotations.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS))
    for seed, name in enumerate(sorted({r["video"] for r in ROWS})):
        write_test_video(root / name, seed=seed)
    return root


def test_plugin_is_installed(run_cli: Any) -> None:
    plugins = {p["name"]: p for p in run_cli("plugins", "--json").assert_success().json()}
    entry = plugins["videorl-{{ cookiecutter.hyphenated }}"]
    assert entry["status"] == "ok"
    assert entry["components"] == {"benchmarks": [NAME]}


def test_benchmark_contract(tmp_path: Path) -> None:
    root = write_fixture(tmp_path / "data")
    responses = {"1": "<answer>A</answer>", "2": "<answer>A</answer>", "3": "<answer>(B)</answer>"}
    bench = JsonlBenchmark()
    rows = assert_benchmark_contract(
        bench, root, responses=responses, expected={"overall": 2 / 3}, require_media=True
    )
    assert [r.video for r in rows] == [str(root.resolve() / r["video"]) for r in ROWS]
    assert {r.problem_type for r in rows} == {"multiple_choice"}
    scores = [bench.score(r, bench.extract(r, responses[r.id])) for r in rows]
    assert bench.aggregate(rows, scores)["categories"] == {"category": {"colour": 1.0, "count": 0.0}}


def test_evaluates_a_tiny_fixture_end_to_end(run_cli: Any, tmp_path: Path, monkeypatch: Any) -> None:
    """`videorl eval run` with a tiny random model: every row is answered (none fails to load)."""
    families = [m["family"] for m in run_cli("models", "list", "--json").assert_success().json()]
    if "qwen2_5_vl" not in families:
        pytest.skip("needs the videorl-models plugin (pip install videorl-models)")
    root = write_fixture(tmp_path / "data")
    model = tmp_path / "model"
    run_cli("models", "tiny", "qwen2_5_vl", str(model)).assert_success()
    monkeypatch.chdir(tmp_path)  # media paths must not depend on the working directory
    out = tmp_path / "run"
    result = run_cli(
        "eval", "run", "--model", str(model), "--benchmark", NAME, "--data-root", str(root), "--out", str(out),
        "--cache-dir", str(tmp_path / "cache"), "--max-tokens", "4", "--quiet",
    )  # fmt: skip
    result.assert_success()
    summary = json.loads((out / "results.json").read_text())["benchmarks"][NAME]
    assert summary["n"] == 3 and summary["n_failed"] == 0, summary
    assert 0.0 <= summary["overall"] <= 1.0
{% endif %}
