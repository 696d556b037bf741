"""A code row gives its tests instead of an answer: the loader and ``RewardInput.from_sample`` take it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from videorl.data import load_samples
from videorl.errors import DataError
from videorl.rewards.types import RewardInput

TESTS = ["assert add(1, 2) == 3"]


def test_the_loader_takes_a_code_row_with_tests_and_no_answer(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        json.dumps(
            {"id": "c1", "problem": "add", "problem_type": "code", "data_type": "text", "tests": TESTS}
        )
        + "\n"
    )
    (sample,) = load_samples(rows)
    assert sample.ground_truth is None and sample.extra["tests"] == TESTS
    rows.write_text(
        json.dumps({"id": "m1", "problem": "2+2?", "problem_type": "math", "data_type": "text"}) + "\n"
    )
    with pytest.raises(DataError, match=r"rows.jsonl:1: missing the ground truth"):
        load_samples(rows)


def test_from_sample_takes_a_row_with_tests_and_no_answer() -> None:
    inp = RewardInput.from_sample({"id": "c1", "problem_type": "code", "tests": TESTS}, "resp")
    assert inp.ground_truth is None and inp.extra["tests"] == TESTS
    with pytest.raises(KeyError, match="answer"):
        RewardInput.from_sample({"id": "m1", "problem_type": "math"}, "resp")
