"""MINERVA (lmms-lab-eval/minerva): multi-step video reasoning with five options.

Official file: ``minerva.json``: ``video_id`` (YouTube id; video ``videos/<id>.mp4`` or ``<id>.mp4``,
also .webm/.mkv/.mov), ``question``, ``answer_choice_0`` … ``answer_choice_4``, ``answer_id``
(0-based), optional ``key``/``question_id``. No reporting categories were found in the file; a
``question_type`` field, where present, is reported. Metric: accuracy.

EasyVideoR1's file has the same name but the unified schema (``problem``/``options``/``solution``); the
schema is recognised by its fields.
"""

from __future__ import annotations

from pathlib import Path

from videorl.api import BenchmarkRow
from videorl_benchmarks.base import BaseBenchmark, index_answer
from videorl_benchmarks.files import read_records, resolve_media
from videorl_benchmarks.unified import read_unified

_EXTS = (".mp4", ".webm", ".mkv", ".mov")


class Minerva(BaseBenchmark):
    name = "minerva"
    official_files = ("minerva.json",)

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        records = read_records(path)
        if records and "solution" in records[0].data:
            return [row for _, row in read_unified(path, root)]
        rows = []
        counts: dict[str, int] = {}
        for rec in records:
            video = rec.text("video_id")
            options = [str(rec.get(f"answer_choice_{i}")) for i in range(5) if rec.has(f"answer_choice_{i}")]
            counts[video] = counts.get(video, 0) + 1
            row_id = str(rec.get("key", rec.get("question_id", f"{video}#{counts[video]}")))
            rows.append(
                BenchmarkRow(
                    id=row_id,
                    problem=rec.text("question"),
                    answer=index_answer(rec, rec.get("answer_id"), len(options)),
                    video=resolve_media(root, [f"{d}{video}{e}" for e in _EXTS for d in ("videos/", "")]),
                    options=options,
                    categories={"question_type": rec.text("question_type")}
                    if rec.has("question_type")
                    else {},
                )
            )
        return rows
