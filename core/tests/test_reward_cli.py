"""``videorl reward``: scoring JSONL rows, bad rows by line number, config, atomic output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from videorl.api import hookimpl
from videorl.rewards import RewardInput, RewardOutput, TaskReward


class ExactReward(TaskReward):
    name = "exact"

    def accuracy(self, answer: Any, truth: Any, inp: RewardInput) -> float:
        return float(answer == truth)


class Boom:
    def __call__(self, inp: RewardInput) -> RewardOutput:
        raise ValueError("reward bug")


class Abstain:
    def __call__(self, inp: RewardInput) -> None:
        return None


class RewardPlugin:
    @staticmethod
    @hookimpl
    def register_rewards(register: Any) -> None:
        register("exact", ExactReward, aliases=["exact match"])
        register("boom", Boom)
        register("abstain", Abstain)


@pytest.fixture
def cli(fake_entry_points: Any, run_cli: Any) -> Any:
    fake_entry_points({"videorl-testrewards": RewardPlugin})
    return run_cli


def write_rows(path: Path, rows: list[Any]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_scores_and_parts(cli: Any, tmp_path: Path) -> None:
    rows = write_rows(
        tmp_path / "rows.jsonl",
        [
            {"id": "a", "problem_type": "Exact Match", "answer": "<answer>cat</answer>",
             "responses": ["<answer>cat</answer>", "<answer>dog</answer>", "cat"]},
            {"sample": {"id": "b", "problem_type": "exact", "solution": "x"}, "response": "<think>t</think><answer>x</answer>"},
            {"id": "c", "problem_type": "abstain", "answer": 1, "response": "r"},
        ],
    )  # fmt: skip
    out = tmp_path / "scored.jsonl"
    result = cli("reward", "--input", str(rows), "--output", str(out)).assert_success()
    scored = read_rows(out)
    assert [r["scores"] for r in scored] == [[1.0, 0.1, 0.9], [1.0], [None]]
    assert scored[0]["parts"][1] == {"accuracy": 0.0, "format": 1.0}
    assert scored[2]["parts"] == [{}]
    assert scored[1]["sample"]["id"] == "b" and "errors" not in scored[0]
    assert "scored 5 response(s) in 3 row(s)" in result.stderr
    assert "Exact Match: 3 scored, mean 0.6667" in result.stderr


def test_bad_rows_are_reported_by_line_and_left_out(cli: Any, tmp_path: Path) -> None:
    rows = write_rows(
        tmp_path / "rows.jsonl",
        [
            {"id": "ok", "problem_type": "exact", "answer": "1", "response": "<answer>1</answer>"},
            "{not json",
            {"id": "p", "answer": "1", "response": "x"},
            {"id": "q", "problem_type": "counting", "answer": "1", "response": "x"},
            {"id": "r", "problem_type": "exact", "answer": "1", "responses": "x"},
            {"id": "s", "problem_type": "exact", "response": "x"},
            ["a list"],
        ],
    )
    out = tmp_path / "scored.jsonl"
    result = cli("reward", "--input", str(rows), "--output", str(out))
    assert result.exit_code == 1
    for line, message in [
        (2, "not valid JSON"),
        (3, "missing field problem_type"),
        (4, "problem_type 'counting' has no reward (registered: abstain, boom, exact)"),
        (5, "'responses' must be a non-empty list of strings"),
        (6, "missing field ground_truth or answer or solution"),
        (7, "expected a JSON object, got list"),
    ]:
        assert f"{rows}:{line}: {message}" in result.stderr
    assert [r["id"] for r in read_rows(out)] == ["ok"]
    assert "6 bad row(s) left out" in result.stderr


def test_failing_reward_is_scored_zero_with_its_error(cli: Any, tmp_path: Path) -> None:
    rows = write_rows(
        tmp_path / "rows.jsonl", [{"id": "z", "problem_type": "boom", "answer": 1, "response": "r"}]
    )
    out = tmp_path / "scored.jsonl"
    result = cli("reward", "--input", str(rows), "--output", str(out)).assert_success()
    row = read_rows(out)[0]
    assert row["scores"] == [0.0] and row["errors"] == ["error: ValueError: reward bug"]
    assert "reward failures (scored 0): error 1" in result.stderr


def test_config_file_sets_weights(cli: Any, tmp_path: Path) -> None:
    rows = write_rows(
        tmp_path / "rows.jsonl",
        [{"problem_type": "exact", "answer": "1", "responses": ["1", "<answer>2</answer>"]}],
    )
    config = tmp_path / "config.yaml"
    config.write_text("rewards:\n  accuracy_weight: 0.5\n  format_weight: 0.5\n")
    out = tmp_path / "scored.jsonl"
    cli("reward", "--input", str(rows), "--output", str(out), "--config", str(config)).assert_success()
    assert read_rows(out)[0]["scores"] == [0.5, 0.5]
    config.write_text("accuracy_weight: 1.0\nformat_weight: 0.0\nfallback: false\n")  # the section alone
    cli("reward", "--input", str(rows), "--output", str(out), "--config", str(config)).assert_success()
    assert read_rows(out)[0]["scores"] == [0.0, 0.0]


def test_invalid_config_writes_nothing(cli: Any, tmp_path: Path) -> None:
    rows = write_rows(tmp_path / "rows.jsonl", [{"problem_type": "exact", "answer": "1", "response": "1"}])
    out = tmp_path / "scored.jsonl"
    out.write_text("previous\n")
    config = tmp_path / "config.yaml"
    config.write_text("rewards:\n  accuracy_weight: 0.7\n")
    result = cli("reward", "--input", str(rows), "--output", str(out), "--config", str(config))
    assert result.exit_code != 0
    assert "accuracy_weight + format_weight must be 1" in result.output + result.stderr
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "rows.jsonl", "scored.jsonl"]


def test_no_rewards_installed(fake_entry_points: Any, run_cli: Any, tmp_path: Path) -> None:
    fake_entry_points({})
    rows = write_rows(tmp_path / "rows.jsonl", [{"problem_type": "exact", "answer": "1", "response": "1"}])
    result = run_cli("reward", "--input", str(rows), "--output", str(tmp_path / "o.jsonl"))
    assert result.exit_code != 0 and "no rewards are installed" in result.output + result.stderr
