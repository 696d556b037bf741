"""MotionBench, LVBench, LongVideoBench, MLVU, Video-Holmes and MINERVA on official-format fixtures."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from videorl.api import DataError
from videorl.testing import assert_benchmark_contract
from videorl_benchmarks.holmes import VideoHolmes
from videorl_benchmarks.longvideobench import LongVideoBench
from videorl_benchmarks.lvbench import LVBench
from videorl_benchmarks.minerva import Minerva
from videorl_benchmarks.mlvu import MLVU
from videorl_benchmarks.motionbench import MotionBench

if TYPE_CHECKING:
    from conftest import Files


def test_motionbench(tmp_path: Path, files: Files) -> None:
    files.jsonl(
        tmp_path / "video_info.meta.jsonl",
        [
            {"key": "k1", "video_path": "self-collected/a.mp4", "video_type": "self",
             "question_type": "Camera Motion",
             "qa": [{"uid": "u1", "question": "How does the camera move?\nA. pans left\nB. pans right",
                     "answer": "B"},
                    {"uid": "u2", "question": "Hidden?\nA. x\nB. y", "answer": "NA"}]},
            {"key": "k2", "video_path": "public-dataset/b.mp4", "video_type": "public",
             "question_type": "Repetition Count",
             "qa": [{"uid": "u3", "question": "How many jumps?\nA. 1\nB. 2\nC. 3", "answer": "C"},
                    {"uid": "u4", "question": "How many claps?\nA. 4\nB. 5", "answer": "A"}]},
        ],
    )  # fmt: skip
    rows = assert_benchmark_contract(
        MotionBench(),
        tmp_path,
        responses={"u1": "B", "u3": "The answer is B.", "u4": "A"},
        expected={
            "overall": 2 / 3,
            "categories": {
                "question_type": {"Camera Motion": 1.0, "Repetition Count": 0.5},
                "video_type": {"self": 1.0, "public": 0.5},
            },
        },
    )
    assert [r.id for r in rows] == ["u1", "u3", "u4"]  # the hidden-answer question is not loaded
    assert rows[0].video == str(tmp_path / "self-collected" / "a.mp4")


def test_lvbench_multi_label_categories(tmp_path: Path, files: Files) -> None:
    files.jsonl(
        tmp_path / "video_info.meta.jsonl",
        [
            {"key": "yt1", "type": "documentary", "qa": [
                {"uid": 1, "question": "Who speaks first?\n(A) a man\n(B) a woman\n(C) a child\n(D) nobody",
                 "answer": "B", "question_type": ["entity recognition", "temporal grounding"]},
                {"uid": 2, "question": "Why?\n(A) x\n(B) y\n(C) z\n(D) w", "answer": "D",
                 "question_type": ["reasoning"]}]},
            {"key": "yt2", "type": "sport", "qa": [
                {"uid": 3, "question": "Score?\n(A) 1-0\n(B) 2-0\n(C) 2-1\n(D) 0-0", "answer": "A",
                 "question_type": ["key information retrieval", "temporal grounding"]}]},
        ],
    )  # fmt: skip
    rows = assert_benchmark_contract(
        LVBench(),
        tmp_path,
        responses={"1": "(B) a woman", "2": "A", "3": "A"},
        expected={
            "overall": 2 / 3,
            "categories": {
                "question_type": {
                    "entity recognition": 1.0,
                    "temporal grounding": 1.0,
                    "reasoning": 0.0,
                    "key information retrieval": 1.0,
                },
                "genre": {"documentary": 0.5, "sport": 1.0},
            },
        },
    )
    assert rows[0].options == ["a man", "a woman", "a child", "nobody"]
    assert rows[0].video == str(tmp_path / "videos" / "yt1.mp4")
    assert LVBench().build_prompt(rows[0], family=None, thinking=False) == (
        "Who speaks first?\n(A) a man\n(B) a woman\n(C) a child\n(D) nobody\n"
        "Answer the question with the option letter"
    )


def test_longvideobench(tmp_path: Path, files: Files) -> None:
    files.json(
        tmp_path / "lvb_val.json",
        [
            {"id": "q1", "video_path": "a.mp4", "question": "What is shown?",
             "candidates": ["cat", "dog", "N/A"],
             "correct_choice": 1, "duration_group": 15, "question_category": "S2E"},
            {"id": "q2", "video_path": "b.mp4", "question": "When?", "candidates": ["early", "late", "never"],
             "correct_choice": 2, "duration_group": 3600, "question_category": "T3O"},
        ],
    )  # fmt: skip
    rows = assert_benchmark_contract(
        LongVideoBench(),
        tmp_path,
        # a long answer without a letter is wrong (lmms-eval would guess at random)
        responses={"q1": "B", "q2": "I am not sure what to answer here because the video is quite long."},
        expected={
            "overall": 0.5,
            "categories": {
                "duration_group": {"15": 1.0, "3600": 0.0},
                "question_category": {"S2E": 1.0, "T3O": 0.0},
            },
        },
    )
    assert rows[0].options == ["cat", "dog"] and rows[0].answer == "B"
    files.json(
        tmp_path / "lvb_val.json",
        [
            {
                "id": "q",
                "video_path": "a",
                "question": "?",
                "candidates": ["a"],
                "correct_choice": 3,
                "duration_group": 15,
                "question_category": "S",
            }
        ],
    )
    with pytest.raises(DataError, match=r"lvb_val\.json:2: answer index 3 is not in 0\.\.0"):
        LongVideoBench().load(tmp_path)


def test_longvideobench_parquet_release(
    tmp_path: Path, files: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Hub repository's ``validation-00000-of-00001.parquet``: ``option0..4`` columns padded with "N/A",
    the videos under ``videos/``; read before ``lvb_val.json`` when both are there."""
    common = {
        "subtitle_path": "x_en.json",
        "starting_timestamp_for_subtitles": 0.0,
        "topic_category": "NP-News-Programs",
    }
    files.parquet(
        tmp_path / "validation-00000-of-00001.parquet",
        [
            {**common, "id": "p1", "video_id": "a", "video_path": "a.mp4", "question": "What is shown?",
             "option0": "cat", "option1": "dog", "option2": "bird", "option3": "N/A", "option4": "N/A",
             "correct_choice": 2, "duration_group": 600, "duration": 431.2, "question_category": "E2O"},
            {**common, "id": "p2", "video_id": "b", "video_path": "b.mp4", "question": "Who speaks first?",
             "option0": "the host", "option1": "the guest", "option2": "N/A", "option3": "N/A",
             "option4": "N/A",
             "correct_choice": 0, "duration_group": 600, "duration": 512.0, "question_category": "SOS"},
            {**common, "id": "p3", "video_id": "c", "video_path": "c.mp4", "question": "Which comes last?",
             "option0": "w", "option1": "x", "option2": "y", "option3": "z", "option4": "v",
             "correct_choice": 4, "duration_group": 15, "duration": 12.5, "question_category": "E2O"},
        ],
    )  # fmt: skip
    json_row = {"id": "j1", "video_path": "a.mp4", "question": "?", "candidates": ["x", "y"],
                "correct_choice": 1,
                "duration_group": 15, "question_category": "S2E"}  # fmt: skip
    files.json(tmp_path / "lvb_val.json", [json_row])  # read only without pyarrow
    files.touch(tmp_path / "videos" / "a.mp4")
    rows = assert_benchmark_contract(
        LongVideoBench(),
        tmp_path,
        responses={"p1": "C", "p2": "B", "p3": "(E) v"},
        expected={
            "overall": 2 / 3,
            "categories": {
                "duration_group": {"600": 0.5, "15": 1.0},
                "question_category": {"E2O": 1.0, "SOS": 0.0},
            },
        },
    )
    assert [r.options for r in rows] == [
        ["cat", "dog", "bird"],
        ["the host", "the guest"],
        ["w", "x", "y", "z", "v"],
    ]
    assert [r.answer for r in rows] == ["C", "A", "E"]
    assert rows[0].video == str(tmp_path / "videos" / "a.mp4")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now fails
    assert [(r.id, r.answer) for r in LongVideoBench().load(tmp_path)] == [("j1", "B")]


def test_mlvu_dev_m_avg(tmp_path: Path, files: Files) -> None:
    files.json(
        tmp_path / "json" / "1_plotQA.json",
        [{"video": "p1.mp4", "question": "Who wins?", "candidates": ["hero", "villain"], "answer": "hero"},
         {"video": "p2.mp4", "question": "Where?", "candidates": ["city", "forest"], "answer": "forest"},
         {"video": "p3.mp4", "question": "When?", "candidates": ["day", "night"], "answer": "day"}],
    )  # fmt: skip
    files.json(
        tmp_path / "json" / "4_count.json",
        [{"video": "c1.mp4", "question": "How many?", "candidates": ["1", "2", "3"], "answer": "3"}],
    )
    files.json(
        tmp_path / "json" / "9_summary.json", [{"video": "s.mp4", "question": "Summarise.", "answer": "..."}]
    )
    # plotQA 2/3 right, count 0/1: M-Avg = (2/3 + 0) / 2 = 1/3; pooled 2/4
    rows = assert_benchmark_contract(
        MLVU(),
        tmp_path,
        responses={"1_plotQA/0": "(A)", "1_plotQA/1": "B", "1_plotQA/2": "B", "4_count/0": "A"},
        expected={
            "overall": 1 / 3,
            "metric": "M-Avg",
            "metrics": {"accuracy (pooled)": 0.5},
            "categories": {"task": {"plotQA": 2 / 3, "count": 0.0}},
        },
    )
    assert len(rows) == 4  # the summary (generation) task is not loaded
    assert rows[0].video == str(tmp_path / "video" / "1_plotQA" / "p1.mp4")


def test_mlvu_test_split(tmp_path: Path, files: Files) -> None:
    files.json(
        tmp_path / "test_question.json",
        [{"question_id": "AR_0", "question_type": "anomaly_reco", "video": "test_a.mp4", "question": "Odd?",
          "candidates": ["x", "y", "z", "w", "v", "u"], "answer": "u"},
         {"question_id": "CO_0", "question_type": "count", "video": "test_b.mp4", "question": "N?",
          "candidates": ["1", "2", "3", "4", "5", "6"], "answer": "2"}],
    )  # fmt: skip
    assert_benchmark_contract(
        MLVU(), tmp_path, responses={"AR_0": "F", "CO_0": "B"}, expected={"overall": 1.0}
    )


def test_video_holmes(tmp_path: Path, files: Files) -> None:
    options = {k: f"option {k}" for k in "ABCDEF"}
    files.json(
        tmp_path / "test_Video-Holmes.json",
        [
            {"video ID": "film1", "Question ID": "1", "Question Type": "SR", "Question": "Why?",
             "Options": options,
             "Answer": "F", "Explanation": "..."},
            {"video ID": "film1", "Question ID": "2", "Question Type": "TCI", "Question": "What caused it?",
             "Options": options, "Answer": "C", "Explanation": "..."},
            {"video ID": "film2", "Question ID": "1", "Question Type": "SR", "Question": "Who?",
             "Options": options,
             "Answer": "A", "Explanation": "..."},
        ],
    )  # fmt: skip
    rows = assert_benchmark_contract(
        VideoHolmes(),
        tmp_path,
        responses={
            "film1/1": "<think>...</think><answer>F</answer>",
            "film1/2": "Final Answer: D",
            "film2/1": "A",
        },
        expected={"overall": 2 / 3, "categories": {"question_type": {"SR": 1.0, "TCI": 0.0}}},
    )
    assert rows[0].video == str(tmp_path / "videos_cropped" / "film1.mp4")
    assert len(rows[0].options or []) == 6


def test_minerva(tmp_path: Path, files: Files) -> None:
    files.json(
        tmp_path / "minerva.json",
        [
            {"key": "m1", "video_id": "yt_a", "question": "What is the total?", "answer_id": 4,
             **{f"answer_choice_{i}": f"{10 * i}" for i in range(5)}},
            {"key": "m2", "video_id": "yt_a", "question": "Which step first?", "answer_id": 0,
             **{f"answer_choice_{i}": f"step {i}" for i in range(5)}},
        ],
    )  # fmt: skip
    files.touch(tmp_path / "videos" / "yt_a.webm")
    rows = assert_benchmark_contract(
        Minerva(), tmp_path, responses={"m1": "The answer is E", "m2": "B"}, expected={"overall": 0.5}
    )
    assert rows[0].video == str(tmp_path / "videos" / "yt_a.webm")
    assert rows[0].answer == "E" and rows[0].options == ["0", "10", "20", "30", "40"]
