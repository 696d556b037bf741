"""VSI-Bench, Charades-STA, STVG, OVO-Bench, ODV-Bench and LiveSports-3K on fixtures in their formats."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from videorl.api import DataError
from videorl.testing import assert_benchmark_contract
from videorl_benchmarks.charades import CharadesSTA
from videorl_benchmarks.livesports import LiveSports3K
from videorl_benchmarks.odvbench import ODVBench
from videorl_benchmarks.ovobench import OVOBench
from videorl_benchmarks.stvg import STVG
from videorl_benchmarks.vsibench import VSIBench

if TYPE_CHECKING:
    from conftest import Files


def _vsi(i: int, kind: str, truth: str, options: list[str] | None = None) -> dict[str, object]:
    return {"id": i, "dataset": "scannet", "scene_name": f"scene{i}", "question_type": kind,
            "question": f"Q{i}?", "options": options, "ground_truth": truth}  # fmt: skip


VSI_ROWS = [
    _vsi(1, "object_rel_direction_easy", "A", ["A. left", "B. right", "C. back"]),
    _vsi(2, "object_rel_direction_hard", "B", ["A. left", "B. right", "C. back"]),
    _vsi(3, "route_planning", "C", ["A. left", "B. right", "C. back"]),
    _vsi(4, "object_counting", "4"),
    _vsi(5, "room_size_estimation", "20"),
]


def test_vsibench_macro_average_with_mra(tmp_path: Path, files: Files) -> None:
    files.parquet(tmp_path / "test-00000-of-00001.parquet", VSI_ROWS)  # nyu-visionx/VSI-Bench as downloaded
    responses = {"1": "A", "2": "A", "3": "C", "4": "4", "5": "It is about 26 square meters."}
    # rel_direction: easy 1, hard 0 → 0.5; route_planning 1; counting 1; room size: the official first word
    # "It" is no number → 0 (videorl reads 26: |26-20|/20 = 0.3 → MRA 0.5)
    # 8-task macro over the 4 present: (0.5 + 1 + 1 + 0) / 4 official, (0.5 + 1 + 1 + 0.5) / 4 videorl
    rows = assert_benchmark_contract(
        VSIBench(),
        tmp_path,
        responses=responses,
        expected={
            "overall": 0.625,
            "metrics": {"8-task mean (accuracy / MRA), videorl's reading": 0.75},
            "readings": {"counted": 5, "differ": 1},
            "categories": {
                "task": {"object_rel_direction": 0.5, "route_planning": 1.0, "object_counting": 1.0,
                         "room_size_estimation": 0.0},
                "question_type": {"object_rel_direction_easy": 1.0, "object_rel_direction_hard": 0.0},
            },
        },
    )  # fmt: skip
    assert rows[3].problem_type == "regression" and rows[3].answer == 4.0
    assert rows[0].video == str(tmp_path / "scannet" / "scene1.mp4")
    bench = VSIBench()
    assert bench.build_prompt(rows[4], family=None, thinking=False) == (
        "These are frames of a video.\nQ5?\nPlease answer the question using a single word or phrase."
    )
    assert bench.score(rows[4], 21.0) == 1.0  # 5% off meets θ = 0.95 with the official inclusive rule


def test_vsibench_official_figure_by_the_official_rule(tmp_path: Path, files: Files) -> None:
    """Six rows in the official format, scored as VSI-Bench's official code (lmms-eval vsibench/utils.py):

        fuzzy_matching(pred) = pred.split(' ')[0].rstrip('.').strip()
        MCA: exact_match = 1. if pred.lower() == target.lower() else 0.
        NA: mean_relative_accuracy: (abs(pred - target) / target <= 1 - np.linspace(.5, .95, 10)).mean()
        overall = mean of the 8 task scores (here the 6 present)

    By hand: "b." → "b" = "b", 1; "The answer is A." → "The", 0; "12" for 10: error 0.2 ≤ 1 - θ only for
    θ ≤ 0.75 (1 - 0.8 is 0.19999999999999996 in floats) → 0.6; "145 cm" for 100: error 0.45 only for
    θ = 0.5 (1 - 0.55 is 0.44999999999999996) → 0.1; "three" for 3 → 1; "About 20 square meters." → "About",
    0. Official: (1 + 0 + 0.6 + 0.1 + 1 + 0) / 6 = 0.45. videorl's reading (A and 20 read): 4.7 / 6, two rows
    read differently.
    """
    letters = ["A. near", "B. far", "C. same"]
    files.jsonl(
        tmp_path / "test.jsonl",
        [
            _vsi(1, "object_rel_distance", "B", letters),
            _vsi(2, "route_planning", "A", letters),
            _vsi(3, "object_abs_distance", "10"),
            _vsi(4, "object_size_estimation", "100"),
            _vsi(5, "object_counting", "3"),
            _vsi(6, "room_size_estimation", "20"),
        ],
    )
    responses = {
        "1": "b.",
        "2": "The answer is A.",
        "3": "12",
        "4": "145 cm",
        "5": "<answer>three</answer>",
        "6": "About 20 square meters.",
    }
    assert_benchmark_contract(
        VSIBench(),
        tmp_path,
        responses=responses,
        expected={
            "overall": pytest.approx(0.45),
            "metrics": {"8-task mean (accuracy / MRA), videorl's reading": pytest.approx(4.7 / 6)},
            "readings": {"counted": 6, "differ": 2},
            "categories": {
                "task": {
                    "object_rel_distance": 1.0,
                    "route_planning": 0.0,
                    "object_abs_distance": pytest.approx(0.6),
                    "object_size_estimation": pytest.approx(0.1),
                    "object_counting": 1.0,
                    "room_size_estimation": 0.0,
                }
            },
        },
    )


def test_vsibench_reads_the_jsonl_beside_the_parquet_without_pyarrow(
    tmp_path: Path, files: Files, monkeypatch: pytest.MonkeyPatch
) -> None:
    files.parquet(tmp_path / "test-00000-of-00001.parquet", VSI_ROWS)
    files.jsonl(tmp_path / "test.jsonl", VSI_ROWS[3:])  # fewer rows: tells which file was read
    assert len(VSIBench().load(tmp_path)) == 5  # Parquet first when pyarrow is there
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now fails
    rows = VSIBench().load(tmp_path)
    assert [r.id for r in rows] == ["4", "5"] and rows[0].answer == 4.0
    (tmp_path / "test.jsonl").unlink()
    with pytest.raises(DataError, match=r"test-00000-of-00001\.parquet: reading Parquet needs pyarrow"):
        VSIBench().load(tmp_path)


def test_charades_lmms_lab_parquet_layout(tmp_path: Path, files: Files) -> None:
    files.parquet(  # lmms-lab/charades_sta as downloaded
        tmp_path / "data" / "test-00000-of-00001.parquet",
        [
            {
                "video": "AO8RW.mp4",
                "caption": "a person is putting a book on a shelf.",
                "timestamp": [0.0, 6.9],
            },
            {"video": "AO8RW.mp4", "caption": "person opens the door.", "timestamp": [10.0, 20.0]},
        ],
    )
    responses = {"AO8RW#1": "0 - 6.9 seconds", "AO8RW#2": "The event happens in the 12.5 - 20 seconds."}
    rows = assert_benchmark_contract(
        CharadesSTA(),
        tmp_path,
        responses=responses,
        expected={
            "overall": (1 + 0.75) / 2,
            "metric": "mIoU",
            "metrics": {"R@0.3": 1.0, "R@0.5": 1.0, "R@0.7": 1.0},
            "categories": {},
        },
    )
    assert rows[1].answer == [10.0, 20.0] and rows[1].problem == "person opens the door."


def test_charades_txt_miou_and_recall(tmp_path: Path) -> None:
    (tmp_path / "charades_sta_test.txt").write_text(
        "AO8RW 0.0 6.9##a person is putting a book on a shelf.\n"
        "AO8RW 10.0 20.0##person opens the door.\n"
        "Y6R7T 5.0 15.0##a person is eating.\n"
    )
    responses = {
        "AO8RW#1": '<answer>{"time": [0.0, 6.9]}</answer>',  # IoU 1
        "AO8RW#2": "The event happens in the 12.5 - 20 seconds.",  # IoU 7.5/10 = 0.75
        "Y6R7T#1": "from 00:00:00 to 00:00:10",  # IoU 5/15 = 1/3
    }
    bench = CharadesSTA()
    rows = assert_benchmark_contract(
        bench,
        tmp_path,
        responses=responses,
        expected={
            "overall": (1 + 0.75 + 1 / 3) / 3,
            "metric": "mIoU",
            "metrics": {"R@0.3": 1.0, "R@0.5": 2 / 3, "R@0.7": 2 / 3},
            "categories": {},
        },
    )
    assert rows[0].answer == [0.0, 6.9] and rows[0].problem == "a person is putting a book on a shelf."
    assert rows[0].video == str(tmp_path / "Charades_v1_480" / "AO8RW.mp4")
    assert "the textual sentence: person opens the door.. Please return" in bench.build_prompt(
        rows[1], family=None, thinking=False
    )
    (tmp_path / "charades_sta_test.txt").write_text("AO8RW 0.0 6.9##ok\nbroken line\n")
    with pytest.raises(
        DataError, match=r"charades_sta_test\.txt:2: expected '<video> <start> <end>##<sentence>'"
    ):
        bench.load(tmp_path)


def test_stvg(tmp_path: Path, files: Files) -> None:
    def item(pid: int, truth: str) -> dict[str, object]:
        return {"problem_id": pid, "problem": "When is the dog running? Please describe its location.",
                "options": [], "path": f"{pid}.mp4", "data_type": "video", "data_source": "stvg",
                "problem_type": "spatial-temporal grounding",
                "solution": f"<answer>{truth}</answer>"}  # fmt: skip

    files.json(
        tmp_path / "stvg.json",
        [item(1, '{"time": [2, 6], "boxes": {"3": [0, 0, 10, 20], "4": [0, 0, 10, 10]}}'),
         item(2, '{"time": [0, 4], "boxes": {}}')],
    )  # fmt: skip
    responses = {
        # tIoU [2,10] vs [2,6] = 0.5; boxes: 3 → 0.5, 4 → 1 → 0.75; score 0.625
        "1": (
            '<answer>{"time": [2, 10], "boxes": {"3": [0, 0, 10, 10], "4": [0, 0, 10, 10], "8": [1, 1, 2, '
            "2]}}</answer>"
        ),
        "2": 'I think {"time": [1, 4]} is right',  # no truth boxes: tIoU 3/4
    }
    assert_benchmark_contract(STVG(), tmp_path, responses=responses, expected={"overall": (0.625 + 0.75) / 2})


def test_ovobench_official_rules_and_macro_average(tmp_path: Path, files: Files) -> None:
    files.json(
        tmp_path / "ovo_bench_new.json",
        [
            {"id": 0, "task": "EPM", "video": "Ego4D/a.mp4", "realtime": 215,
             "question": "Who did I talk to?",
             "options": ["a man", "a woman", "a child"], "gt": 1},
            {"id": 1, "task": "HLD", "video": "Ego4D/b.mp4", "realtime": 20, "question": "What was odd?",
             "options": ["x", "y"], "gt": 0},
            {"id": 2, "task": "OCR", "video": "c.mp4", "realtime": 3, "question": "What is written?",
             "options": ["STOP", "GO"], "gt": 0},
            {"id": 3, "task": "REC", "video": "d.mp4", "activity": "jump rope",
             "test_info": [{"realtime": 5, "count": 2}, {"realtime": 9, "count": 12}]},
            {"id": 4, "task": "SSR", "video": "e.mp4",
             "test_info": [{"realtime": 7, "step": "cut the paper", "type": 0},
                           {"realtime": 9, "step": "cut the paper", "type": 1}]},
            {"id": 5, "task": "CRR", "video": "f.mp4", "question": "What does she do next?",
             "test_info": [{"realtime": 1, "type": 0}, {"realtime": 4, "type": 1}]},
        ],
    )  # fmt: skip
    responses = {
        "0": "B",  # right
        "1": "B",  # wrong
        "2": "A",  # right
        "3_0": "2",  # right
        "3_1": "1 and 2",  # digits "12" → right (official rule)
        "4_0": "N",  # right (shorthand)
        "4_1": "yes",  # wrong: the official check is case-sensitive ("Yes" in the answer)
        "5_0": "No.",  # right
        "5_1": "Yes",  # right
    }
    # tasks: EPM 1, HLD 0 → backward 0.5; OCR 1 → realtime 1; REC 1, SSR 0.5, CRR 1 → forward 5/6
    bench = OVOBench()
    rows = assert_benchmark_contract(
        bench,
        tmp_path,
        responses=responses,
        expected={
            "overall": (0.5 + 1 + 5 / 6) / 3,
            "metrics": {"accuracy (pooled)": 7 / 9},
            "categories": {
                "task": {"EPM": 1.0, "HLD": 0.0, "OCR": 1.0, "REC": 1.0, "SSR": 0.5, "CRR": 1.0},
                "category": {"backward": 0.5, "realtime": 1.0, "forward": 5 / 6},
            },
        },
    )
    by_id = {r.id: r for r in rows}
    assert by_id["3_1"].video == str(tmp_path / "chunked_videos" / "3_1.mp4")
    assert by_id["4_1"].answer == "Yes" and by_id["3_1"].answer == 12
    assert bench.build_prompt(by_id["0"], family=None, thinking=False) == (
        "\nQuestion: Who did I talk to?\nOptions:\nA. a man; B. a woman; C. a child;\n\n"
        "Respond only with the letter corresponding to your chosen option (e.g., A, B, C). \n"
        "Do not include any additional text or explanation in your response.\n"
    )
    rec_prompt = bench.build_prompt(by_id["3_0"], family="qwen3_vl", thinking=False)
    assert "Now, answer the following question: How many times did they jump rope?\n" in rec_prompt
    assert bench.build_prompt(by_id["0"], family="qwen3_vl", thinking=False).startswith(
        "Select the best answer"
    )


def test_ovobench_unified(tmp_path: Path, files: Files) -> None:
    files.json(
        tmp_path / "ovobench.json",
        [
            {"problem_type": "multiple choice", "problem": "Where?", "options": ["A: here", "B: there"],
             "path": "0.mp4", "solution": "<answer>B</answer>", "problem_id": "ovo_0", "ovo_task": "EPM",
             "ovo_category": "backward", "ovo_id": 0, "data_type": "video"},
            {"problem_type": "SSR", "problem": "paint on the paper", "options": [], "path": "1527_9.mp4",
             "solution": "<answer>No</answer>", "problem_id": "ovo_1527_9", "ovo_task": "SSR",
             "ovo_category": "forward", "ovo_id": 1527, "ovo_test_idx": 9, "ovo_type": 0,
             "data_type": "video"},
        ],
    )  # fmt: skip
    rows = assert_benchmark_contract(
        OVOBench(), tmp_path, responses={"ovo_0": "B", "ovo_1527_9": "Yes"}, expected={"overall": 0.5}
    )
    assert rows[1].answer == "No" and rows[1].categories == {"task": "SSR", "category": "forward"}


def test_odvbench_and_livesports(tmp_path: Path, files: Files) -> None:
    def mc(pid: str, answer: str, **extra: object) -> dict[str, object]:
        return {"problem_id": pid, "problem": "What happens?", "options": ["A: a goal", "B: a foul"],
                "path": f"{pid}.mp4", "solution": f"<answer>{answer}</answer>", "data_type": "video",
                "problem_type": "multiple choice", **extra}  # fmt: skip

    odv = tmp_path / "odv"
    files.json(
        odv / "odvbench.json",
        [mc("o1", "A", odv_task="Perception", odv_subtask="Count"), mc("o2", "B", odv_task="Perception",
         odv_subtask="OCR"), mc("o3", "A", odv_task="Reasoning", odv_subtask="Cause")],
    )  # fmt: skip
    assert_benchmark_contract(
        ODVBench(),
        odv,
        responses={"o1": "A", "o2": "A", "o3": "A"},
        expected={
            "overall": 2 / 3,
            "categories": {"task": {"Perception": 0.5, "Reasoning": 1.0},
                           "subtask": {"Count": 1.0, "OCR": 0.0, "Cause": 1.0}},
        },
    )  # fmt: skip
    live = tmp_path / "live"
    files.json(
        live / "livesports3k_qa.json",
        [mc("I0r_e10_q1", "A", q_type_livesports="Who", ocr_livesports=1),
         mc("I0r_e10_q2", "B", q_type_livesports="When", ocr_livesports=0),
         mc("I0r_e11_q1", "B", q_type_livesports="Who", ocr_livesports=0)],
    )  # fmt: skip
    assert_benchmark_contract(
        LiveSports3K(),
        live,
        responses={"I0r_e10_q1": "A", "I0r_e10_q2": "A", "I0r_e11_q1": "B"},
        expected={
            "overall": 2 / 3,
            "categories": {"question_type": {"Who": 1.0, "When": 0.0}, "ocr": {"OCR": 1.0, "non-OCR": 0.5}},
        },
    )
