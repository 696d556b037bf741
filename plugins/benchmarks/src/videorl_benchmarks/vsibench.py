"""VSI-Bench (nyu-visionx/VSI-Bench): visual-spatial intelligence, the official 8-task macro average.

Official file: the ``full`` config's ``test-*.parquet`` (or the same rows as ``test.jsonl`` /
``test.json``): ``id``, ``dataset`` (arkitscenes, scannet, scannetpp), ``scene_name`` (video
``<dataset>/<scene_name>.mp4``), ``question_type``, ``question``, ``options`` (["A. ..."] for
multiple-choice types, null otherwise), ``ground_truth`` (letter, or a number).

Multiple-choice types (object_rel_direction_easy/medium/hard, object_rel_distance, route_planning,
obj_appearance_order) score by letter; numeric types (object_abs_distance, object_counting,
object_size_estimation, room_size_estimation) by mean relative accuracy over θ ∈ {0.50, …, 0.95} with
the official inclusive rule in floats (|pred − truth| / truth ≤ 1 − θ, θ from ``np.linspace``, so an
error of exactly 0.2 fails θ = 0.8; EasyVideoR1 uses <). Overall = the mean of 8 task scores, the three
rel_direction difficulties averaged into one. EasyVideoR1's ``vsibench.json`` is read when the official
file is absent.

Official figure: the official code reads only the first word of the answer (``fuzzy_matching``:
``pred.split(' ')[0].rstrip('.').strip()``), compared case-insensitively with the letter, or as a
number (``float``, or an English number word); anything else scores 0. videorl's reading (the letter or
the one number anywhere in the answer) is reported beside it in ``metrics``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar

from videorl.api import BenchmarkRow, answers, benchmark_summary, group_means, macro_mean, mean
from videorl_benchmarks.base import BaseBenchmark, letter_answer, official_text
from videorl_benchmarks.files import Record, read_records

MC_TYPES = (
    "object_rel_direction_easy",
    "object_rel_direction_medium",
    "object_rel_direction_hard",
    "object_rel_distance",
    "route_planning",
    "obj_appearance_order",
)
NUMERIC_TYPES = ("object_abs_distance", "object_counting", "object_size_estimation", "room_size_estimation")


def official_word(text: str) -> str:
    """VSI-Bench's official ``fuzzy_matching``: the text's first space-separated word, trailing dots off."""
    return text.split(" ")[0].rstrip(".").strip()


def official_number(word: str) -> float | None:
    """The official ``to_float`` of a word (``float(word)``), or an English number word ("three")."""
    try:
        value = float(word)
    except ValueError:
        return answers.parse_number(word) if word.isalpha() else None
    return value if math.isfinite(value) else None  # nan/inf score 0 officially too


def task_of(question_type: str) -> str:
    return "object_rel_direction" if question_type.startswith("object_rel_direction") else question_type


class VSIBench(BaseBenchmark):
    name = "vsi-bench"
    metric = "8-task mean (accuracy / MRA)"
    proportions = ("question_type",)  # a task merges question types; MRA rows score partially
    official_files = ("test-*.parquet", "*.parquet", "test.jsonl", "test.json")
    unified_file = "vsibench.json"
    unified_categories: ClassVar[dict[str, str]] = {"original_question_type": "question_type"}
    preamble = "These are frames of a video."
    options_header = "Options:"
    aggregates_predictions = True

    def official_read(self, row: BenchmarkRow, response: str) -> Any:
        word = official_word(official_text(response))
        if row.problem_type == "multiple_choice":  # exact_match: pred.lower() == target.lower()
            return word.upper() if len(word) == 1 else word or None
        return official_number(word)

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        return [self._row(root, rec) for rec in read_records(path)]

    def _row(self, root: Path, rec: Record) -> BenchmarkRow:
        kind = rec.text("question_type")
        row = BenchmarkRow(
            id=rec.text("id"),
            problem=rec.text("question"),
            answer=None,
            video=str(root / rec.text("dataset") / f"{rec.text('scene_name')}.mp4"),
            categories={"question_type": kind},
        )
        if kind in MC_TYPES:
            row.options = [answers.strip_option_letter(o) for o in rec.items("options")]
            row.answer = letter_answer(rec, rec.text("ground_truth"), len(row.options))
        elif kind in NUMERIC_TYPES:
            row.problem_type, row.answer = "regression", rec.number("ground_truth")
        else:
            raise rec.error(f"unknown question_type {kind!r}")
        return row

    def summarize(self, rows: list[BenchmarkRow], scores: list[float]) -> dict[str, Any]:
        per_type = group_means(rows, scores, "question_type")
        per_task: dict[str, list[float]] = {}
        for kind, value in per_type.items():
            per_task.setdefault(task_of(kind), []).append(value)
        tasks = {task: mean(values) for task, values in sorted(per_task.items())}
        return benchmark_summary(
            macro_mean(tasks) if tasks else mean(scores),
            {"task": tasks, "question_type": per_type},
            metric=self.metric,
        )
