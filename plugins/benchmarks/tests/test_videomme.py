"""Video-MME (with and without subtitles) and Video-MME-v2 on fixtures in their official formats."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from videorl.api import DataError
from videorl.testing import assert_benchmark_contract
from videorl_benchmarks.videomme import VideoMME, VideoMMESubtitles, parse_srt
from videorl_benchmarks.videomme_v2 import VideoMMEv2, group_score

if TYPE_CHECKING:
    from conftest import Files


def _q(qid: str, vid: str, duration: str, domain: str, sub: str, task: str, answer: str) -> dict[str, object]:
    return {
        "video_id": qid[:3], "duration": duration, "domain": domain, "sub_category": sub, "url": "u",
        "videoID": vid, "question_id": qid, "task_type": task, "question": f"Question {qid}?",
        "options": ["A. apple", "B. banana", "C. cherry", "D. date"], "answer": answer,
    }  # fmt: skip


@pytest.fixture
def videomme(tmp_path: Path, files: Files) -> Path:
    files.parquet(  # lmms-lab/Video-MME as downloaded
        tmp_path / "videomme" / "test-00000-of-00001.parquet",
        [
            _q("001-1", "vidA", "short", "Knowledge", "Humanity", "Counting Problem", "B"),
            _q("001-2", "vidA", "short", "Knowledge", "Humanity", "OCR Problems", "C"),
            _q("002-1", "vidB", "long", "Sports Competition", "Football", "Counting Problem", "D"),
            _q("002-2", "vidB", "long", "Sports Competition", "Football", "Action Recognition", "A"),
        ],
    )
    files.touch(tmp_path / "data" / "vidA.mp4")
    files.touch(tmp_path / "videos" / "vidB.mp4")
    (tmp_path / "subtitle").mkdir()
    (tmp_path / "subtitle" / "vidA.srt").write_text(
        "1\n00:00:01,000 --> 00:00:02,500\n<font color=white>Hello there</font>\n\n"
        "2\n00:00:03,000 --> 00:00:04,000\nSecond line\ncontinued\n\n"
    )
    return tmp_path


RESPONSES = {
    "001-1": "B",  # right
    "001-2": "The answer is (A).",  # wrong
    "002-1": "<think>it is not A</think>D",  # right
    # 002-2: an empty response: no letter, so the official figure leaves it out (videorl's counts it wrong)
}


def test_videomme_scores_and_categories(videomme: Path) -> None:
    rows = assert_benchmark_contract(
        VideoMME(),
        videomme,
        responses=RESPONSES,
        expected={
            "overall": 2 / 3,
            "metric": "accuracy",
            "metrics": {"accuracy, videorl's reading": 0.5},
            "readings": {"counted": 3, "differ": 0},
            "categories": {  # over the 3 counted rows
                "duration": {"short": 0.5, "long": 1.0},
                "domain": {"Knowledge": 0.5, "Sports Competition": 1.0},
                "sub_category": {"Humanity": 0.5, "Football": 1.0},
                "task_type": {"Counting Problem": 1.0, "OCR Problems": 0.0},
            },
        },
    )
    assert rows[0].video == str(videomme / "data" / "vidA.mp4")
    assert rows[2].video == str(videomme / "videos" / "vidB.mp4")  # EasyVideoR1's layout also found
    assert rows[0].options == ["apple", "banana", "cherry", "date"]
    assert VideoMME().build_prompt(rows[0], family=None, thinking=False) == (
        "Select the best answer to the following multiple-choice question based on the video. Respond with "
        "only the letter (A, B, C, or D) of the correct option.\nQuestion: Question 001-1?\nA. apple\n"
        "B. banana\nC. cherry\nD. date\nThe best answer is:"
    )


def test_videomme_with_subtitles(videomme: Path) -> None:
    bench = VideoMMESubtitles()
    rows = assert_benchmark_contract(bench, videomme, responses=RESPONSES, expected={"overall": 2 / 3})
    prompt = bench.build_prompt(rows[0], family="qwen3_vl", thinking=False)
    assert prompt.startswith("This video's subtitles are listed below:\nHello there\nSecond line continued\n")
    assert prompt.endswith("The best answer is: ")
    no_subs = bench.build_prompt(rows[2], family=None, thinking=False)
    assert no_subs.startswith("Select the best answer")


def test_videomme_official_figure_by_the_official_rule(tmp_path: Path, files: Files) -> None:
    """Six rows in the official format, scored as Video-MME's eval_your_results.py scores them:

        s = s.strip(); for answer_prefix in answer_prefixes: s = s.replace(answer_prefix, "")
        matches = re.search(r'[ABCD]', s); return "" if matches is None else matches[0]
        if extration != "": correct += extration == gt_answer; answered += 1   # accuracy = correct / answered

    (``answer_prefixes`` with its two missing commas). By hand: row 1 "B" → B, right; row 2 "Best answer:
    C" → the fused prefix is not removed, so the "B" of "Best" → wrong; row 3 has no capital A-D → left
    out; row 4's answer "d" is lower-case → left out; row 5 "The answer is (A)." → A, wrong; row 6 "Based
    on the video, D." → the "B" of "Based", wrong. Official: 1 right of 4 answered = 0.25. videorl's
    reading: B, C, none, D, A, none → rows 1, 2, 4 right of all 6 = 0.5; rows 2, 4, 6 read differently.
    """
    truths = ["B", "C", "A", "D", "D", "D"]
    files.jsonl(
        tmp_path / "videomme" / "test.jsonl",
        [
            _q(
                f"00{i}-1",
                f"v{i}",
                "short" if i <= 3 else "long",
                "Knowledge",
                "Humanity",
                "Counting Problem",
                t,
            )
            for i, t in enumerate(truths, start=1)
        ],
    )
    responses = {
        "001-1": "B",
        "002-1": "Best answer: C",
        "003-1": "I cannot tell from the video.",
        "004-1": "<think>Compare A and B.</think><answer>d</answer>",
        "005-1": "The answer is (A).",
        "006-1": "Based on the video, D.",
    }
    assert_benchmark_contract(
        VideoMME(),
        tmp_path,
        responses=responses,
        expected={
            "overall": 1 / 4,
            "metrics": {"accuracy, videorl's reading": 3 / 6},
            "readings": {"counted": 4, "differ": 3},
            "categories": {"duration": {"short": 1 / 2, "long": 0.0}},  # short: rows 1, 2; long: 5, 6
        },
    )


def test_parse_srt() -> None:
    cues = parse_srt("1\r\n00:01:02,500 --> 00:01:03,000\r\nHi <i>you</i>\r\n\r\n2\n00:00:00.0 --> x\n")
    assert cues == [(62.5, 63.0, "Hi you")]


# --- Video-MME-v2 -----------------------------------------------------------------------------------


def _v2(qid: str, answer: str, group_type: str, structure: str, level: int, second: str) -> dict[str, object]:
    return {
        "video_id": 7, "url": "u", "group_type": group_type, "group_structure": structure,
        "question_id": qid, "question": f"Q{qid}?", "options": "A. one\nB. two\nC. three",
        "answer": answer, "level": level, "second_head": second, "third_head": f"{second}-x",
    }  # fmt: skip


def test_group_score_rules() -> None:
    assert group_score([True, True, False, True], "relevance", "") == 9 / 16
    assert group_score([True, True, False, True], "logic", "[1, 2, 3, 4]") == 4 / 16
    # Q1 right, Q2 wrong, Q3 right: the [1, [2, 3], 4] structure extends the run to 2
    assert group_score([True, False, True, False], "logic", "[1, [2, 3], 4]") == 4 / 12
    # Q1 wrong, Q2 right: the [[1, 2], 3, 4] structure counts a run of 1
    assert group_score([False, True, False, True], "logic", "[[1, 2], 3, 4]") == 1 / 10
    assert group_score([True] * 4, "logic", "[[1, 2], 3, 4]") == 1.0


def test_videomme_v2_group_scoring(tmp_path: Path, files: Files) -> None:
    files.parquet(
        tmp_path / "test.parquet",
        [_v2(f"r{i}", "A", "relevance", "[1, 2, 3, 4]", 1, "Perception") for i in range(4)]
        + [_v2(f"l{i}", "B", "logic", "[1, [2, 3], 4]", 2, "Reasoning") for i in range(4)],
    )
    responses = {"r0": "A", "r1": "A", "r2": "C", "r3": "A", "l0": "B", "l1": "A", "l2": "B", "l3": "B"}
    # relevance: 3 right → 9/16; logic [1,[2,3],4]: Q1 right, Q2 wrong, Q3 right → run 2 → 4/12
    rows = assert_benchmark_contract(
        VideoMMEv2(),
        tmp_path,
        responses=responses,
        expected={
            "overall": (9 / 16 + 4 / 12) / 2,
            "metric": "group score",
            "metrics": {"question accuracy": 6 / 8, "relevance linear score": 3 / 4},
            "categories": {
                "level": {"1": 9 / 16, "2": 4 / 12},
                "second_head": {"Perception": 9 / 16, "Reasoning": 4 / 12},
                "group_type": {"relevance": 9 / 16, "logic": 4 / 12},
            },
        },
    )
    assert rows[0].options == ["one", "two", "three"]
    assert rows[0].video == str(tmp_path / "video" / "007.mp4")
    thinking = VideoMMEv2().build_prompt(rows[0], family=None, thinking=True)
    assert thinking.startswith("These are the frames of a video.\nQuestion: Qr0?\nA. one\n")
    assert thinking.endswith("strictly in the format: 'Final Answer: <letter>.")


def test_videomme_v2_needs_whole_groups(tmp_path: Path, files: Files) -> None:
    files.jsonl(
        tmp_path / "test.jsonl", [_v2(f"r{i}", "A", "relevance", "[1, 2, 3, 4]", 1, "P") for i in range(3)]
    )
    with pytest.raises(DataError, match="3 rows, not a multiple of 4"):
        VideoMMEv2().load(tmp_path)
