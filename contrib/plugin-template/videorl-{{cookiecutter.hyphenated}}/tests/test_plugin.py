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
    assert entry["components"] == {"rewards": ["{{ cookiecutter.underscored }}"]}


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
{% else %}
from pathlib import Path

from videorl.testing import assert_benchmark_contract

from videorl_{{ cookiecutter.underscored }}.benchmark import JsonlBenchmark


def test_plugin_is_installed(run_cli: Any) -> None:
    plugins = {p["name"]: p for p in run_cli("plugins", "--json").assert_success().json()}
    entry = plugins["videorl-{{ cookiecutter.hyphenated }}"]
    assert entry["status"] == "ok"
    assert entry["components"] == {"benchmarks": ["{{ cookiecutter.underscored }}"]}


def test_benchmark_contract(tmp_path: Path) -> None:
    rows = [
        {"id": 1, "question": "Colour?", "options": ["red", "blue"], "answer": "A", "category": "colour"},
        {"id": 2, "question": "Count?", "options": ["1", "2"], "answer": "B", "category": "count"},
        {"id": 3, "question": "Colour?", "options": ["red", "blue"], "answer": "B", "category": "colour"},
    ]
    (tmp_path / "annotations.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    responses = {"1": "<answer>A</answer>", "2": "<answer>A</answer>", "3": "<answer>(B)</answer>"}
    bench = JsonlBenchmark()
    rows = assert_benchmark_contract(bench, tmp_path, responses=responses, expected={"overall": 2 / 3})
    scores = [bench.score(r, bench.extract(r, responses[r.id])) for r in rows]
    assert bench.aggregate(rows, scores)["categories"] == {"category": {"colour": 1.0, "count": 0.0}}
{% endif %}
