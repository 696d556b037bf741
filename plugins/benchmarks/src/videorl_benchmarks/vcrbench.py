"""VCR-Bench: video chain-of-thought reasoning, multiple-choice and open-ended questions.

The official annotation format could not be pinned down beyond what EasyVideoR1's loader converts:
``vcrbench.json`` either in EasyVideoR1's unified schema, or "raw" records with ``id``, ``question``,
``multiple-choice`` (bool), ``choices`` ({A..D}), ``answer`` and ``video_path`` (both recognised by
their fields); videos under the data root (EasyVideoR1: ``VCR-Bench/v1/videos``). Multiple-choice
rows score by letter; open-ended rows need an LLM judge (EasyVideoR1's ``llm_judge.py``): without a
``judge_score`` in the predictions they get the rule-based match. Reported by question type.
"""

from __future__ import annotations

from pathlib import Path

from videorl.api import BenchmarkRow
from videorl_benchmarks.base import BaseBenchmark, letter_answer
from videorl_benchmarks.files import Record, read_records
from videorl_benchmarks.unified import read_unified


class VCRBench(BaseBenchmark):
    name = "vcr-bench"
    official_files = ("vcrbench.json",)

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        records = read_records(path)
        if records and "solution" in records[0].data:
            rows = [row for _, row in read_unified(path, root)]
        else:
            rows = [self._raw_row(root, rec) for rec in records]
        for row in rows:
            row.categories["question_type"] = row.problem_type
        return rows

    def _raw_row(self, root: Path, rec: Record) -> BenchmarkRow:
        row = BenchmarkRow(
            id=rec.text("id"),
            problem=rec.text("question"),
            answer=rec.text("answer"),
            problem_type="open_ended",
            video=str(root / rec.text("video_path")),
        )
        if rec.get("multiple-choice"):
            choices = rec.get("choices")
            if not isinstance(choices, dict) or not choices:
                raise rec.error("a multiple-choice record needs 'choices' {letter: text}")
            row.problem_type = "multiple_choice"
            row.options = [str(choices[k]) for k in sorted(choices)]
            row.answer = letter_answer(rec, row.answer, len(row.options))
        return row
