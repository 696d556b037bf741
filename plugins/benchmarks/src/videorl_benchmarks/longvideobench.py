"""LongVideoBench (longvideobench/LongVideoBench), validation split, without subtitles.

Official file: ``lvb_val.json``: ``id``, ``video_path`` (under ``videos/``), ``question``, ``candidates``
(the parquet variant pads with "N/A", dropped here), ``correct_choice`` (0-based index),
``duration_group`` (15, 60, 600, 3600 s), ``question_category`` (17 codes). Metric: accuracy, by
duration group and question category. lmms-eval guesses a random letter for long answers without one;
here such answers are wrong (deterministic). EasyVideoR1's ``longvideobench.json`` is read when the
official file is absent.
"""

from __future__ import annotations

from pathlib import Path

from videorl.api import BenchmarkRow
from videorl_benchmarks.base import BaseBenchmark, index_answer
from videorl_benchmarks.files import read_records, resolve_media


class LongVideoBench(BaseBenchmark):
    name = "longvideobench"
    official_files = ("lvb_val.json", "lvb_val.jsonl")
    unified_file = "longvideobench.json"
    question_label = "Question: "

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        rows = []
        for rec in read_records(path):
            options = [str(c) for c in rec.items("candidates") if str(c) != "N/A"]
            rows.append(
                BenchmarkRow(
                    id=rec.text("id"),
                    problem=rec.text("question"),
                    answer=index_answer(rec, rec.get("correct_choice"), len(options)),
                    video=resolve_media(root, [f"videos/{rec.text('video_path')}", rec.text("video_path")]),
                    options=options,
                    categories={k: rec.text(k) for k in ("duration_group", "question_category")},
                )
            )
        return rows
