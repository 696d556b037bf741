"""One dataset-row schema: training, ``cache build`` and ``videorl reward`` read a row the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from videorl.api import hookimpl
from videorl.data import load_samples
from videorl.errors import DataError
from videorl.rewards import RewardInput, RewardOutput

#: a Video-R1 row that also carries an ``id`` (datasets merged from both schemas do)
ROW = {
    "id": "row-a",
    "problem_id": "p7",
    "problem": "How many?",
    "problem_type": "which id",
    "solution": "<answer>3</answer>",
    "options": ["A. 3", "B. 4"],
    "tests_note": "kept",
}


class IdReward:
    """Scores 1 when the reward sees the id the training loader gives the row."""

    def __call__(self, inp: RewardInput) -> RewardOutput:
        return RewardOutput(float(inp.sample_id == "p7"))


class IdPlugin:
    @staticmethod
    @hookimpl
    def register_rewards(register: Any) -> None:
        register("which_id", IdReward)


def test_a_row_with_id_and_problem_id_gets_one_id_under_train_and_reward(
    tmp_path: Path, fake_entry_points: Any, run_cli: Any
) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(ROW) + "\n")
    (sample,) = load_samples(data)  # what `videorl train` (and `cache build`) read
    assert sample.id == "p7"

    fake_entry_points({"videorl-idrewards": IdPlugin})
    scored = tmp_path / "scored.jsonl"
    lines = tmp_path / "responses.jsonl"
    lines.write_text(json.dumps({**ROW, "response": "<answer>3</answer>"}) + "\n")
    run_cli("reward", "--input", str(lines), "--output", str(scored)).assert_success()
    assert json.loads(scored.read_text())["scores"] == [1.0]  # the reward saw "p7", not "row-a"


def test_a_training_sample_and_its_raw_row_map_to_the_same_reward_input(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(ROW) + "\n")
    (sample,) = load_samples(data)
    from_sample = RewardInput.from_sample(sample, "r", model_family="qwen3_vl")
    from_row = RewardInput.from_sample(ROW, "r", model_family="qwen3_vl")
    assert from_sample == from_row
    assert (from_row.sample_id, from_row.ground_truth, from_row.options, from_row.data_type) == (
        "p7",
        "<answer>3</answer>",
        ["A. 3", "B. 4"],
        "text",
    )
    assert from_row.extra == {"tests_note": "kept"}


def test_a_scored_row_is_refused_with_the_training_parsers_reason() -> None:
    with pytest.raises(DataError, match=r"^line 3: options must be a list of strings"):
        RewardInput.from_sample({"problem_type": "x", "answer": "1", "options": "A"}, "r", where="line 3")
