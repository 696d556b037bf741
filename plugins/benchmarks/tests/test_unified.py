"""EasyVideoR1's unified evaluation records, read by every adapter that has such a file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from videorl.api import DataError
from videorl.testing import assert_benchmark_contract
from videorl_benchmarks.charades import CharadesSTA
from videorl_benchmarks.longvideoreason import LongVideoReason
from videorl_benchmarks.videomme import VideoMME
from videorl_benchmarks.videommmu import VideoMMMU

if TYPE_CHECKING:
    from conftest import Files


def _mc(pid: int, answer: str, **extra: object) -> dict[str, object]:
    return {
        "problem_id": pid, "problem": f"Question {pid}?", "options": ["A. one", "B. two", "C. three"],
        "solution": f"<answer>{answer}</answer>", "path": f"./videos/v{pid}.mp4", "data_type": "video",
        "problem_type": "multiple choice", **extra,
    }  # fmt: skip


def test_unified_multiple_choice_with_categories(tmp_path: Path, files: Files) -> None:
    files.json(
        tmp_path / "videomme.json",
        [
            _mc(1, "B", duration="short", domain="Knowledge", original_question_type="OCR Problems"),
            _mc(2, "C", duration="long", domain="Knowledge", original_question_type="OCR Problems"),
            _mc(3, "A", duration="long", domain="Sports", original_question_type="Counting Problem"),
        ],
    )
    rows = assert_benchmark_contract(
        VideoMME(),
        tmp_path,
        responses={"1": "B", "2": "A", "3": "<answer>A</answer>"},
        expected={
            "overall": 2 / 3,
            "categories": {
                "duration": {"short": 1.0, "long": 0.5},
                "domain": {"Knowledge": 0.5, "Sports": 1.0},
                "task_type": {"OCR Problems": 0.5, "Counting Problem": 1.0},
            },
        },
    )
    assert rows[0].options == ["one", "two", "three"]
    assert rows[0].video == str(tmp_path / "videos" / "v1.mp4")


def test_unified_only_benchmark_and_colon_options(tmp_path: Path, files: Files) -> None:
    item = _mc(7, "C")
    item["options"] = ["A: one", "B: two", "C: three"]
    files.json(tmp_path / "longvideoreason.json", [item, _mc(8, "A")])
    rows = assert_benchmark_contract(
        LongVideoReason(), tmp_path, responses={"7": "The answer is C"}, expected={"overall": 0.5}
    )
    assert rows[0].options == ["one", "two", "three"]


def test_charades_answer_inside_think(tmp_path: Path, files: Files) -> None:
    files.json(
        tmp_path / "charades_sta.json",
        [
            {
                "problem_id": 0, "problem": "person turn a light on.", "options": [], "path": "AO8RW.mp4",
                "solution": '<think>{"time": [24.296875, 30.4], "boxes": {}}</think><|x|>',
                "problem_type": "temporal grounding", "data_type": "video",
            }
        ],
    )  # fmt: skip
    rows = CharadesSTA().load(tmp_path)
    assert rows[0].answer == [24.296875, 30.4]
    assert rows[0].problem_type == "temporal_grounding"


def test_unreadable_solution_names_the_record(tmp_path: Path, files: Files) -> None:
    path = files.json(tmp_path / "longvideoreason.json", [_mc(1, "A"), _mc(2, "Z")])
    with pytest.raises(DataError, match=rf"{path}:\d+: solution '<answer>Z</answer>' is not one of the 3"):
        LongVideoReason().load(tmp_path)
    item = _mc(3, "A")
    item["problem_type"] = "poetry"
    files.json(tmp_path / "longvideoreason.json", [item])
    with pytest.raises(DataError, match="unknown problem_type 'poetry'"):
        LongVideoReason().load(tmp_path)


def test_unified_image_and_numerical_rows(tmp_path: Path, files: Files) -> None:
    files.json(
        tmp_path / "videommmu_with_image.json",
        [
            {"problem_id": 13, "problem": "Which one? <image 1>", "options": ["A. x", "B. y"],
             "solution": "<answer>B</answer>", "path": "./validation_Chemistry_13.mp4",
             "image_path": "./images/validation_Chemistry_13.png", "problem_type": "multiple choice"},
            {"problem_id": 14, "problem": "How much?", "options": None, "solution": "<answer>3.5</answer>",
             "path": "./validation_Accounting_2.mp4", "problem_type": "numerical"},
        ],
    )  # fmt: skip
    rows = assert_benchmark_contract(
        VideoMMMU(),
        tmp_path,
        responses={"13": "B", "14": "The total is 3.50 dollars"},
        expected={
            "overall": 1.0,
            "categories": {"subject": {"Chemistry": 1.0, "Accounting": 1.0},
                           "discipline": {"Science": 1.0, "Business": 1.0}, "track": {"Adaptation": 1.0}},
        },
    )  # fmt: skip
    assert rows[0].image == str(tmp_path / "images" / "validation_Chemistry_13.png")
    assert rows[1].problem_type == "numerical" and rows[1].answer == 3.5 and rows[1].options is None
