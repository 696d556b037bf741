"""LiveSports-3K QA (stdKonjac/LiveSports-3K): questions on live sports commentary clips.

Its official annotation format could not be pinned down: this adapter loads EasyVideoR1's unified
``livesports3k_qa.json`` (options "A: ..."; ``q_type_livesports`` What/Who/When; ``ocr_livesports``
1/0; clips ``{video_id}_{begin}_{end}.mp4`` cut with EasyVideoR1's ``cilp.py``, under the data root,
EasyVideoR1's ``LiveSports-3K-QA/clips``). Metric: accuracy, by question type and OCR vs non-OCR.
"""

from __future__ import annotations

from typing import ClassVar

from videorl.api import BenchmarkRow
from videorl_benchmarks.base import BaseBenchmark
from videorl_benchmarks.files import Record


class LiveSports3K(BaseBenchmark):
    name = "livesports-3k"
    unified_file = "livesports3k_qa.json"
    unified_categories: ClassVar[dict[str, str]] = {"q_type_livesports": "question_type"}

    def adapt_unified(self, rec: Record, row: BenchmarkRow) -> BenchmarkRow:
        row = super().adapt_unified(rec, row)
        if rec.get("ocr_livesports") is not None:
            row.categories["ocr"] = (
                "OCR" if str(rec.get("ocr_livesports")) in ("1", "True", "true") else "non-OCR"
            )
        return row
