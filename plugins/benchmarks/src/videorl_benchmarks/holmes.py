"""Video-Holmes (TencentARC/Video-Holmes): complex reasoning on suspense short films.

Official file: ``test_Video-Holmes.json``: ``video ID`` (video ``videos_cropped/<id>.mp4``),
``Question ID``, ``Question Type`` (SR, IMC, TCI, TA, MHR, PAR, CTI), ``Question``, ``Options`` (A–F),
``Answer`` (letter). Metric: accuracy, by question type. EasyVideoR1's ``holmes.json`` (no question
type) is read when the official file is absent.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from videorl.api import BenchmarkRow
from videorl_benchmarks.base import BaseBenchmark, letter_answer
from videorl_benchmarks.files import read_records, resolve_media


class VideoHolmes(BaseBenchmark):
    name = "video-holmes"
    official_files = ("test_Video-Holmes.json",)
    unified_file = "holmes.json"
    question_label = "Question: "
    instructions: ClassVar[dict[str, str]] = {
        "multiple_choice": "Select the best answer to the following multiple-choice question based on the "
        "video. "
        "Respond with only the letter (A, B, C, D, E, or F) of the correct option."
    }

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        rows = []
        for rec in read_records(path):
            choices = rec.get("Options")
            if not isinstance(choices, dict) or not choices:
                raise rec.error("field 'Options' must be an object {letter: text}")
            options = [str(choices[k]) for k in sorted(choices)]
            video = rec.text("video ID")
            rows.append(
                BenchmarkRow(
                    id=f"{video}/{rec.text('Question ID')}",
                    problem=rec.text("Question"),
                    answer=letter_answer(rec, rec.text("Answer"), len(options)),
                    video=resolve_media(root, [f"videos_cropped/{video}.mp4", f"videos/{video}.mp4"]),
                    options=options,
                    categories={"question_type": rec.text("Question Type")},
                )
            )
        return rows
