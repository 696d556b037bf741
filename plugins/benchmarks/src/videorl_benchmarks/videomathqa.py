"""VideoMathQA (MBZUAI/VideoMathQA): mathematical reasoning in videos, official MCQ and MBin rules.

Official files: ``mcq/*.parquet`` (420 five-option questions) and ``multi_binary/*.parquet`` (1,680
two-option questions, four per MCQ question), or the same rows as ``.jsonl``/``.json``:
``question_id``, ``videoID`` (video ``videos/<videoID>.mp4``), ``question``, ``options`` (["A. ..."]),
``answer`` (letter), ``category`` (10), ``length`` (short/medium/long).

Official metrics: MCQ accuracy; MBin accuracy, where a question counts as correct only if all of its
binary items (same ``question_id``) are. Overall = MCQ accuracy (MBin accuracy when only the binary
set is loaded); both, and EasyVideoR1's pooled mean over all items, are in ``metrics``. Category and
length breakdowns are over the questions of the overall figure. EasyVideoR1's ``videomathqa.jsonl``
(both sets pooled) is read when no official folder exists; its two-option items are grouped into MBin
questions by ``question_id`` (else by ``problem_id``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from videorl.api import BenchmarkRow, answers, benchmark_summary, mean
from videorl_benchmarks.base import BaseBenchmark, letter_answer
from videorl_benchmarks.files import Record, data_files, read_records
from videorl_benchmarks.prompts import thinking_ending

CONFIGS = {"mcq": "mcq", "multi_binary": "mbin"}


class VideoMathQA(BaseBenchmark):
    name = "videomathqa"
    resample_group = "question"  # a multi-binary question scores its sub-questions together (eval intervals)
    proportions = ()  # rows of a question are not independent
    official_files = ("mcq", "multi_binary")
    unified_file = "videomathqa.jsonl"

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        rows = []
        for config, fmt in CONFIGS.items():
            folder = root / config
            counts: dict[str, int] = {}
            for file in data_files(folder):
                for rec in read_records(file):
                    question_id = rec.text("question_id")
                    counts[question_id] = counts.get(question_id, 0) + 1
                    row_id = question_id if fmt == "mcq" else f"{question_id}#{counts[question_id]}"
                    rows.append(self._row(root, rec, row_id, fmt, question_id))
        return rows

    def _row(self, root: Path, rec: Record, row_id: str, fmt: str, question_id: str) -> BenchmarkRow:
        options = [answers.strip_option_letter(o) for o in rec.items("options")]
        return BenchmarkRow(
            id=row_id,
            problem=rec.text("question"),
            answer=letter_answer(rec, rec.text("answer"), len(options)),
            video=str(root / "videos" / f"{rec.text('videoID')}.mp4"),
            options=options,
            categories={"category": rec.text("category"), "length": rec.text("length")},
            extra={"format": fmt, "question": question_id},
        )

    def adapt_unified(self, rec: Record, row: BenchmarkRow) -> BenchmarkRow:
        fmt = "mbin" if row.options and len(row.options) == 2 else "mcq"
        for key in ("category", "length"):
            if rec.has(key):
                row.categories[key] = str(rec.get(key))
        row.extra.update(format=fmt, question=str(rec.get("question_id", row.id)))
        return row

    def official_prompt(self, row: BenchmarkRow, *, thinking: bool) -> str:
        letters = "A or B" if row.options and len(row.options) == 2 else "A, B, C, D or E"
        head = (
            "Select the best answer to the following multiple-choice question based on the video. "
            f"Respond with the letter ({letters}) of the correct option."
        )
        body = "\n".join([head, row.problem, *self.format_options(row.options or [])]) + "\n"
        if thinking:
            return body + thinking_ending(row.problem_type)
        return body + f"\nAnswer with the option's letter ({letters}) from the given choices directly."

    def summarize(self, rows: list[BenchmarkRow], scores: list[float]) -> dict[str, Any]:
        mcq: list[tuple[dict[str, Any], float]] = []
        groups: dict[str, tuple[dict[str, Any], list[float]]] = {}
        for row, score in zip(rows, scores, strict=True):
            if row.extra.get("format") == "mbin":
                groups.setdefault(str(row.extra["question"]), (row.categories, []))[1].append(score)
            else:
                mcq.append((row.categories, score))
        mbin = [(cats, float(all(s >= 1.0 for s in ss))) for cats, ss in groups.values()]
        units = mcq or mbin
        metrics = {"accuracy (pooled, EasyVideoR1)": mean(scores)}
        if mcq:
            metrics["MCQ"] = mean(s for _, s in mcq)
        if mbin:
            metrics["MBin"] = mean(s for _, s in mbin)
        categories: dict[str, dict[str, float]] = {}
        for kind in ("category", "length"):
            values: dict[str, list[float]] = {}
            for cats, score in units:
                if kind in cats:
                    values.setdefault(str(cats[kind]), []).append(score)
            if values:
                categories[kind] = {v: mean(s) for v, s in sorted(values.items())}
        return benchmark_summary(mean(s for _, s in units), categories, metrics=metrics)
