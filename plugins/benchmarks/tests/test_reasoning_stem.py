"""VCR-Bench, VideoReasonBench, MMVU, Video-MMMU and VideoMathQA on fixtures in their formats."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from videorl.testing import assert_benchmark_contract
from videorl_benchmarks.mmvu import MMVU, MMVUAll
from videorl_benchmarks.vcrbench import VCRBench
from videorl_benchmarks.videomathqa import VideoMathQA
from videorl_benchmarks.videommmu import VideoMMMU
from videorl_benchmarks.videoreasonbench import VideoReasonBench

if TYPE_CHECKING:
    from conftest import Files


def test_vcrbench_raw_format(tmp_path: Path, files: Files) -> None:
    files.json(
        tmp_path / "vcrbench.json",
        [
            {"id": "1", "question": "What falls?", "multiple-choice": True,
             "choices": {"A": "a cup", "B": "a ball", "C": "a pen", "D": "a key"}, "answer": "B",
             "video_path": "video/MLVU/x.mp4"},
            {"id": "2", "question": "What does she pour?", "multiple-choice": False, "choices": {},
             "answer": "Orange juice", "video_path": "video/COIN/y.mp4"},
            {"id": "3", "question": "What colour is the car?", "multiple-choice": False, "answer": "red",
             "video_path": "video/COIN/z.mp4"},
        ],
    )  # fmt: skip
    rows = assert_benchmark_contract(
        VCRBench(),
        tmp_path,
        # the open-ended answers get the rule-based match (truth contained in the answer)
        responses={"1": "B", "2": "Therefore, the final answer is: she pours orange juice.", "3": "blue"},
        expected={
            "overall": 2 / 3,
            "categories": {"question_type": {"multiple_choice": 1.0, "open_ended": 0.5}},
        },
    )
    assert rows[1].problem_type == "open_ended" and rows[1].answer == "Orange juice"
    assert rows[0].video == str(tmp_path / "video" / "MLVU" / "x.mp4")


def test_videoreasonbench_final_answer_and_families(tmp_path: Path, files: Files) -> None:
    problem = "Track the cups. Provide a summary of the final answer after 'Final Answer:'"
    files.json(
        tmp_path / "videoreasonbench.json",
        [
            {"problem_id": "c1", "problem": problem, "options": [], "path": "cup/1.mp4", "data_type": "video",
             "problem_type": "open-ended", "solution": "<answer>The ball is under cup 2.</answer>"},
            {"problem_id": "g1", "problem": problem, "options": [], "path": "grid/7.mp4",
             "data_type": "video",
             "problem_type": "open-ended", "solution": "<answer>Row 1: X O\nRow 2: O X</answer>"},
        ],
    )  # fmt: skip
    bench = VideoReasonBench()
    rows = assert_benchmark_contract(
        bench,
        tmp_path,
        responses={
            "c1": "Swaps... Final Answer: the ball is under cup 2.",
            "g1": "Final Answer:\nRow 1: X X\nRow 2: O X",
        },
        expected={"overall": 0.5, "categories": {"family": {"cup": 1.0, "grid": 0.0}}},
    )
    assert bench.extract(rows[1], "blah\nFinal Answer:\nRow 1: X O\nRow 2: O X") == "Row 1: X O\nRow 2: O X"
    assert bench.build_prompt(rows[0], family=None, thinking=False) == problem


def _mmvu(i: int, kind: str, subject: str, answer: str) -> dict[str, object]:
    choices = {"A": "one", "B": "two", "C": "three", "D": "", "E": ""} if kind == "multiple-choice" else {}
    return {
        "id": f"validation_{i}", "video": f"https://huggingface.co/datasets/yale-nlp/MMVU/resolve/main/videos/{subject}/{i}.mp4",
        "question_type": kind, "metadata": {"subject": subject}, "question": f"Q{i}?", "choices": choices,
        "answer": answer,
    }  # fmt: skip


def test_mmvu_and_mmvu_all(tmp_path: Path, files: Files) -> None:
    files.json(
        tmp_path / "validation.json",
        [
            _mmvu(0, "multiple-choice", "Chemistry", "C"),
            _mmvu(1, "multiple-choice", "Art", "A"),
            _mmvu(2, "open-ended", "Computer_Science", "Depth-First Search"),
        ],
    )
    responses = {"validation_0": "Therefore, the final answer is: C", "validation_1": "B",
                 "validation_2": "The algorithm is depth-first search."}  # fmt: skip
    rows = assert_benchmark_contract(
        MMVU(),
        tmp_path,
        responses={k: v for k, v in responses.items() if k != "validation_2"},
        expected={
            "overall": 0.5,
            "categories": {
                "subject": {"Chemistry": 1.0, "Art": 0.0},
                "discipline": {"Science": 1.0, "Humanities_and_Social_Science": 0.0},
            },
        },
    )
    assert rows[0].options == ["one", "two", "three"]  # empty trailing choices dropped
    assert rows[0].video == str(tmp_path / "videos" / "Chemistry" / "0.mp4")
    assert MMVU().build_prompt(rows[0], family=None, thinking=False) == (
        "Question:Q0?\nA: one\nB: two\nC: three\nVisual Information: processed video\nDo not generate any "
        "intermediate reasoning process. Answer directly with the option letter from the given choices."
    )
    assert_benchmark_contract(
        MMVUAll(),
        tmp_path,
        responses=responses,
        expected={
            "overall": 2 / 3,
            "categories": {"question_type": {"multiple-choice": 0.5, "open-ended": 1.0},
                           "discipline": {"Engineering": 1.0}},
        },
    )  # fmt: skip


def test_videommmu_tracks_numbers_and_images(tmp_path: Path, files: Files) -> None:
    mc = {
        "question": "Which law applies?",
        "options": ["Ohm", "Hooke", "Newton"],
        "question_type": "multiple-choice",
    }
    files.parquet(  # lmms-lab/VideoMMMU as downloaded: one folder per track
        tmp_path / "Perception" / "test-00000-of-00001.parquet",
        [dict(mc, id="validation_Physics_1", answer="A"), dict(mc, id="validation_Art_Theory_2", answer="B")],
    )
    files.parquet(
        tmp_path / "Adaptation" / "test-00000-of-00001.parquet",
        [
            {"id": "validation_Math_3", "question": "Compute <image 1>.", "options": [], "answer": "2.5",
             "question_type": "open", "image": {"bytes": b"\x89PNG fake", "path": None}},
            dict(mc, id="validation_Finance_4", answer="C", image={"bytes": None, "path": "imgs/f4.png"}),
        ],
    )  # fmt: skip
    files.touch(tmp_path / "imgs" / "f4.png")
    bench = VideoMMMU()
    rows = assert_benchmark_contract(
        bench,
        tmp_path,
        responses={
            "validation_Physics_1": "A",  # right
            "validation_Art_Theory_2": "C",  # wrong
            "validation_Math_3": "Therefore, the final answer is: 2.50",  # right (2 decimals)
            "validation_Finance_4": "C",  # right
        },
        expected={
            "overall": 0.75,
            "categories": {
                "track": {"Perception": 0.5, "Adaptation": 1.0},
                "subject": {"Physics": 1.0, "Art_Theory": 0.0, "Math": 1.0, "Finance": 1.0},
                "discipline": {"Science": 1.0, "Art": 0.0, "Business": 1.0},
            },
        },
    )
    numeric = rows[2]
    assert numeric.problem_type == "numerical" and numeric.answer == 2.5
    assert numeric.image == str(tmp_path / "images" / "validation_Math_3.png")
    assert Path(numeric.image).read_bytes() == b"\x89PNG fake"  # bytes of the parquet row written once
    assert rows[3].image == str(tmp_path / "imgs" / "f4.png")
    assert bench.build_prompt(rows[0], family=None, thinking=False).endswith(
        "A. Ohm\nB. Hooke\nC. Newton\nPlease ignore the Quiz question in last frame of the video."
    )
    assert bench.build_prompt(numeric, family=None, thinking=False).startswith(
        "You should watch and learn the video content. Then apply what you learned to answer the following "
        "open-ended question. The image for this question is at the end of the video.\nCompute <image 1>."
    )
    assert bench.build_prompt(numeric, family="qwen3_vl", thinking=False).startswith(
        "The image for this question is at the end of the video.\nAnswer the following question"
    )


def test_videomathqa_mcq_and_mbin(tmp_path: Path, files: Files) -> None:
    def mcq(qid: str, answer: str, category: str) -> dict[str, object]:
        return {"question_id": qid, "videoID": f"vid{qid}", "question": f"Solve {qid}.",
                "options": ["A. 1", "B. 2", "C. 3", "D. 4", "E. 5"], "answer": answer,
                "category": category, "length": "short", "steps": "[]"}  # fmt: skip

    def binary(qid: str, answer: str) -> dict[str, object]:
        return dict(mcq(qid, answer, "Geometry Area"), options=["A. 1", "B. 2"])

    # MBZUAI/VideoMathQA as downloaded: one folder per config
    files.parquet(
        tmp_path / "mcq" / "test-00000-of-00001.parquet",
        [mcq("q1", "A", "Chart"), mcq("q2", "E", "Geometry Area")],
    )
    files.parquet(
        tmp_path / "multi_binary" / "test-00000-of-00001.parquet",
        [binary("q1", "A"), binary("q1", "B"), binary("q2", "A"), binary("q2", "A")],
    )
    responses = {"q1": "A", "q2": "D", "q1#1": "A", "q1#2": "B", "q2#1": "A", "q2#2": "B"}
    # MCQ 1/2; MBin: q1 both right → 1, q2 one wrong → 0 → 1/2; pooled 4/6
    rows = assert_benchmark_contract(
        VideoMathQA(),
        tmp_path,
        responses=responses,
        expected={
            "overall": 0.5,
            "metrics": {"MCQ": 0.5, "MBin": 0.5, "accuracy (pooled, EasyVideoR1)": 4 / 6},
            "categories": {"category": {"Chart": 1.0, "Geometry Area": 0.0}, "length": {"short": 0.5}},
        },
    )
    assert (
        VideoMathQA()
        .build_prompt(rows[2], family=None, thinking=False)
        .endswith("A. 1\nB. 2\n\nAnswer with the option's letter (A or B) from the given choices directly.")
    )
    assert rows[0].video == str(tmp_path / "videos" / "vidq1.mp4")
