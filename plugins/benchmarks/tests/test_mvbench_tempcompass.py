"""MVBench (per-task JSON, clip bounds) and TempCompass (nested per-format question files)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from videorl.api import DataError
from videorl.testing import assert_benchmark_contract
from videorl_benchmarks.mvbench import TASKS, MVBench
from videorl_benchmarks.tempcompass import TempCompass

if TYPE_CHECKING:
    from conftest import Files


def test_mvbench_tasks_clips_and_macro_average(tmp_path: Path, files: Files) -> None:
    files.json(
        tmp_path / "json" / "action_sequence.json",
        [
            {"video": "AJTDO.mp4", "question": "What did the person do first?",
             "candidates": ["sat", "ran", "ate"],
             "answer": "ran", "start": 2.5, "end": 9.0},
            {"video": "XYZ01.mp4", "question": "Then?", "candidates": ["sat", "ran"], "answer": "sat",
             "start": 0, "end": 4},
        ],
    )  # fmt: skip
    files.json(
        tmp_path / "json" / "object_existence.json",
        [
            {"video": "video_10000.mp4", "question": "Is there a cube?", "candidates": ["yes", "no"],
             "answer": "no"},
            {"video": "video_10001.mp4", "question": "Is there a ball?", "candidates": ["yes", "no"],
             "answer": "yes"},
            {"video": "video_10002.mp4", "question": "Is there a cone?", "candidates": ["yes", "no"],
             "answer": "yes"},
        ],
    )  # fmt: skip
    responses = {
        "action_sequence/0": "(B) ran",  # right
        "action_sequence/1": "Best option: (B)",  # wrong
        "object_existence/0": "B",  # right
        "object_existence/1": "A",  # right
        "object_existence/2": "no",  # wrong (option text of B)
    }
    # per task: action_sequence 1/2, object_existence 2/3 → mean of tasks 7/12; pooled 3/5
    rows = assert_benchmark_contract(
        MVBench(),
        tmp_path,
        responses=responses,
        expected={
            "overall": (0.5 + 2 / 3) / 2,
            "metrics": {"accuracy (pooled)": 0.6},
            "categories": {"task": {"action_sequence": 0.5, "object_existence": 2 / 3}},
        },
    )
    assert rows[0].clip == (2.5, 9.0)
    assert rows[0].answer == "B"
    assert rows[0].video == str(tmp_path / "video" / "star" / "Charades_v1_480" / "AJTDO.mp4")
    assert rows[2].clip is None and rows[2].video.endswith("clevrer/video_validation/video_10000.mp4")
    prompt = MVBench().build_prompt(rows[0], family=None, thinking=False)
    assert prompt.endswith(
        "Question: What did the person do first?\nOptions:\n(A) sat\n(B) ran\n(C) ate\nOnly give the best "
        "option."
    )
    assert len(TASKS) == 20


def test_mvbench_answer_must_be_a_candidate(tmp_path: Path, files: Files) -> None:
    path = files.json(
        tmp_path / "json" / "action_count.json",
        [{"video": "a.mp4", "question": "How many?", "candidates": ["1", "2"], "answer": "3"}],
    )
    with pytest.raises(DataError, match=rf"{path}:2: answer '3' is not one of the options"):
        MVBench().load(tmp_path)
    files.json(
        tmp_path / "json" / "action_count.json",
        [{"video": "a.mp4", "question": "How many?", "candidates": ["1", "2"], "answer": "2"}],
    )
    files.json(
        tmp_path / "json" / "action_localization.json",
        [
            {
                "video": "b.mp4",
                "question": "When?",
                "candidates": ["x", "y"],
                "answer": "x",
                "start": 5,
                "end": 2,
            }
        ],
    )
    with pytest.raises(DataError, match="clip bounds start=5.0, end=2.0"):
        MVBench().load(tmp_path)


def test_tempcompass_formats_and_dimensions(tmp_path: Path, files: Files) -> None:
    files.json(
        tmp_path / "questions" / "multi-choice.json",
        {
            "v1": {
                "action": [
                    {"question": "What is the man doing?\nA. dunking a basketball\nB. running\nC. swimming",
                     "answer": "A. dunking a basketball"}
                ],
                "speed": [{"question": "How fast?\nA. slow\nB. fast", "answer": "B. fast"}],
            }
        },
    )  # fmt: skip
    files.json(
        tmp_path / "questions" / "yes_no.json",
        {"v1": {"speed": [{"question": "Is the man moving slowly?", "answer": "no"}]},
         "v2": {"direction": [{"question": "Is the car turning left?", "answer": "yes"}]}},
    )  # fmt: skip
    files.json(
        tmp_path / "questions" / "caption_matching.json",
        {"v2": {"direction": [{"question": "Which caption matches the video?\nCaption A: a car turns left\n"
                                           "Caption B: a car turns right",
                               "answer": "Caption A: a car turns left"}]}},
    )  # fmt: skip
    responses = {
        "multi-choice/v1/action/0": "A",  # right
        "multi-choice/v1/speed/0": "A. slow",  # wrong
        "yes_no/v1/speed/0": "No, it is fast.",  # right
        "yes_no/v2/direction/0": "no",  # wrong
        "caption_matching/v2/direction/0": "Caption A matches best.",  # videorl: right; official: no match
    }
    bench = TempCompass()
    rows = assert_benchmark_contract(
        bench,
        tmp_path,
        responses=responses,
        expected={
            "overall": 2 / 5,
            "metrics": {"accuracy, videorl's reading": 3 / 5},
            "readings": {"counted": 5, "differ": 1},
            "categories": {
                "format": {"multi-choice": 0.5, "yes_no": 0.5, "caption_matching": 0.0},
                "dimension": {"action": 1.0, "speed": 0.5, "direction": 0.0},
            },
        },
    )
    mc = rows[0]
    assert (mc.problem, mc.options, mc.answer) == (
        "What is the man doing?",
        ["dunking a basketball", "running", "swimming"],
        "A",
    )
    assert bench.build_prompt(mc, family=None, thinking=False) == (
        "What is the man doing?\nA. dunking a basketball\nB. running\nC. swimming\n"
        "Please directly give the best option:"
    )
    assert bench.build_prompt(rows[2], family=None, thinking=False).endswith("\nPlease answer yes or no:")
    caption = rows[-1]
    assert caption.options == ["a car turns left", "a car turns right"] and caption.answer == "A"
    assert bench.read_answer(caption, "a car turns right") == "B"  # the option text names B


def test_tempcompass_official_figure_by_the_official_rule(tmp_path: Path, files: Files) -> None:
    """Eight rows in the official format, scored by TempCompass's rules (lmms-eval tempcompass/utils.py),
    the ChatGPT fallback off (an unmatched answer counts as wrong):

        yes/no:       pred.lower().startswith("yes") → "yes"; .startswith("no") → "no"; else unmatched
        multi-choice: pred == doc["answer"]; pred in ["A", "B", "C", "D"];
                      pred.startswith("B.") or "B)" → pred.split(".")[0] / split(")")[0] vs the answer letter

    By hand: "Nope" → no, right; "Definitely not." unmatched; "Yes, the car turns left." → yes, right;
    "The answer is yes." unmatched; "Nothing indicates that." → "no" (it starts with "no"), wrong; "B) fast"
    → B, right; "(A) slow" unmatched; "b" unmatched (case-sensitive). Official: 3 / 8. videorl's reading:
    no, no, yes, yes, none, B, A, B → 7 / 8 right; rows 2, 4, 5, 7, 8 read differently.
    """
    yes_no = [
        ("no", "Nope"),
        ("no", "Definitely not."),
        ("yes", "Yes, the car turns left."),
        ("yes", "The answer is yes."),
        ("yes", "Nothing indicates that."),
    ]
    files.json(
        tmp_path / "questions" / "yes_no.json",
        {
            "v1": {
                "direction": [{"question": f"Statement {i}?", "answer": a} for i, (a, _) in enumerate(yes_no)]
            }
        },
    )
    mc = [("B. fast", "B) fast"), ("A. slow", "(A) slow"), ("B. fast", "b")]
    files.json(
        tmp_path / "questions" / "multi-choice.json",
        {"v1": {"speed": [{"question": "How fast?\nA. slow\nB. fast", "answer": a} for a, _ in mc]}},
    )
    responses = {f"yes_no/v1/direction/{i}": r for i, (_, r) in enumerate(yes_no)}
    responses |= {f"multi-choice/v1/speed/{i}": r for i, (_, r) in enumerate(mc)}
    assert_benchmark_contract(
        TempCompass(),
        tmp_path,
        responses=responses,
        expected={
            "overall": 3 / 8,
            "metrics": {"accuracy, videorl's reading": 7 / 8},
            "readings": {"counted": 8, "differ": 5},
            "categories": {"format": {"yes_no": 2 / 5, "multi-choice": 1 / 3}},
        },
    )


def test_tempcompass_bad_answer(tmp_path: Path, files: Files) -> None:
    files.json(
        tmp_path / "questions" / "yes_no.json", {"v1": {"speed": [{"question": "Fast?", "answer": "maybe"}]}}
    )
    with pytest.raises(
        DataError, match=r"yes_no\.json: video 'v1', dimension 'speed', item 0: yes/no answer"
    ):
        TempCompass().load(tmp_path)
