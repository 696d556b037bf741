"""LongVideoBench (longvideobench/LongVideoBench), validation split, without subtitles.

Official files (the Hub repository's root): ``lvb_val.json`` and the same rows as
``validation-00000-of-00001.parquet`` (what ``load_dataset`` and lmms-eval's ``longvideobench_val_v``
read); the Parquet is read first, the JSON when pyarrow is missing or the Parquet absent. Fields: ``id``,
``video_path`` (under ``videos/``), ``question``, the options (the JSON's ``candidates`` list; the
Parquet's ``option0`` … ``option4`` columns, padded with "N/A", dropped here), ``correct_choice`` (0-based
index), ``duration_group`` (15, 60, 600, 3600 s), ``question_category`` (17 codes). The test split
(``test-*.parquet``, ``lvb_test_wo_gt.json``) has no answers and is not read. Metric: accuracy, by
duration group and question category. lmms-eval guesses a random letter for long answers without one;
here such answers are wrong (deterministic). EasyVideoR1's ``longvideobench.json`` is read when no
official file is there.
"""

from __future__ import annotations

from pathlib import Path

from videorl.api import BenchmarkRow
from videorl_benchmarks.base import BaseBenchmark, index_answer
from videorl_benchmarks.files import Record, read_records, resolve_media

_OPTION_COLUMNS = tuple(f"option{i}" for i in range(5))


def _options(rec: Record) -> list[str]:
    """The options without the "N/A" padding: the ``candidates`` list (JSON), else ``option0..4``."""
    if rec.has("candidates") or not any(rec.has(k) for k in _OPTION_COLUMNS):
        given = rec.items("candidates")
    else:
        given = [rec.get(k) for k in _OPTION_COLUMNS if rec.get(k) is not None]
    return [str(c) for c in given if str(c) != "N/A"]


class LongVideoBench(BaseBenchmark):
    name = "longvideobench"
    official_files = ("validation-*.parquet", "lvb_val.json", "lvb_val.jsonl")
    unified_file = "longvideobench.json"
    question_label = "Question: "

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        rows = []
        for rec in read_records(path):
            options = _options(rec)
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
