"""MLVU (MLVU/MVLU): multi-task long-video understanding, M-Avg over its multiple-choice tasks.

Official files, either split:
- dev: ``json/<n>_<task>.json`` (``video``, ``question``, ``candidates``, ``answer`` = the option text),
  videos ``video/<n>_<task>/<video>``; the generation tasks (sub-scene captioning, video summary; G-Avg,
  LLM-judged) are not loaded;
- test: ``test_question.json`` (``question_id``, ``question_type``, ``video``, ``question``,
  ``candidates``, ``answer``), videos ``video/<video>``; the answers were released separately and must
  be in the file.
Metric: M-Avg = the mean of the per-task accuracies (lmms-eval); the pooled accuracy (what
EasyVideoR1 reports, over its 502-question ``mlvu.json``, read when no official file is present) is
in ``metrics``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

from videorl.api import BenchmarkRow, benchmark_summary, breakdown, group_means, macro_mean, mean
from videorl_benchmarks.base import BaseBenchmark, text_answer
from videorl_benchmarks.files import Record, read_records


def _row(rec: Record, row_id: str, task: str, video: Path) -> BenchmarkRow:
    options = [str(c) for c in rec.items("candidates")]
    return BenchmarkRow(
        id=row_id,
        problem=rec.text("question"),
        answer=text_answer(rec, rec.text("answer"), options),
        video=str(video),
        options=options,
        categories={"task": task},
    )


class MLVU(BaseBenchmark):
    name = "mlvu"
    metric = "M-Avg"
    proportions = ("accuracy (pooled)", "categories")  # M-Avg, a mean of task accuracies, is not one
    official_files = ("json", "test_question.json")
    unified_file = "mlvu.json"
    preamble = (
        "Carefully watch this video and pay attention to every detail. Based on your observations, select "
        "the best option that accurately addresses the question."
    )
    question_label = "Question: "
    options_header = "Options:"
    option_format = "({letter}) {text}"
    instructions: ClassVar[dict[str, str]] = {"multiple_choice": "Only give the best option."}

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        if path.is_file():  # test split
            return [
                _row(
                    rec,
                    rec.text("question_id"),
                    rec.text("question_type"),
                    root / "video" / rec.text("video"),
                )
                for rec in read_records(path)
            ]
        rows = []
        for file in sorted(path.glob("*.json")):
            records = read_records(file)
            if not all(rec.has("candidates") for rec in records):
                continue  # a generation task
            task = re.sub(r"^\d+_", "", file.stem)
            for i, rec in enumerate(records):
                rows.append(
                    _row(rec, f"{file.stem}/{i}", task, root / "video" / file.stem / rec.text("video"))
                )
        return rows

    def summarize(self, rows: list[BenchmarkRow], scores: list[float]) -> dict[str, Any]:
        if rows and all("task" in r.categories for r in rows):
            overall = macro_mean(group_means(rows, scores, "task"))
        else:
            overall = mean(scores)
        return benchmark_summary(
            overall, breakdown(rows, scores), metric=self.metric, metrics={"accuracy (pooled)": mean(scores)}
        )
