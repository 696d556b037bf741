"""MotionBench (zai-org/MotionBench): fine-grained motion questions.

Official file: ``video_info.meta.jsonl`` (also under ``data/``), one video per line: ``key``,
``video_path`` (relative to the benchmark directory), ``video_type``, ``question_type``, ``qa``
(``uid``, ``question`` with its options as "A. ..." lines, ``answer``; "NA" marks a hidden test answer,
such questions are not loaded). Metric: accuracy, by question type and video type. EasyVideoR1's
``motionbench.json`` is read when the official file is absent.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from videorl.api import BenchmarkRow
from videorl_benchmarks.base import BaseBenchmark, letter_answer
from videorl_benchmarks.files import iter_qa, resolve_media, split_inline_options


class MotionBench(BaseBenchmark):
    name = "motionbench"
    official_files = ("video_info.meta.jsonl", "data/video_info.meta.jsonl")
    unified_file = "motionbench.json"
    unified_categories: ClassVar[dict[str, str]] = {"original_question_type": "question_type"}
    instructions: ClassVar[dict[str, str]] = {
        "multiple_choice": "Answer with only the option letter (A, B, C, D, E, or F)."
    }

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        rows = []
        for video, qa in iter_qa(path):
            answer = qa.text("answer").strip()
            if answer.upper() == "NA":
                continue
            stem, options = split_inline_options(qa.text("question"))
            if not options:
                raise qa.error("question without 'A. ...' option lines")
            categories: dict[str, str | list[str]] = {
                k: str(qa.get(k, video.get(k)))
                for k in ("question_type", "video_type")
                if qa.has(k) or video.has(k)
            }
            rows.append(
                BenchmarkRow(
                    id=qa.text("uid"),
                    problem=stem,
                    answer=letter_answer(qa, answer, len(options)),
                    video=resolve_media(path.parent, [video.text("video_path")]),
                    options=options,
                    categories=categories,
                )
            )
        return rows
