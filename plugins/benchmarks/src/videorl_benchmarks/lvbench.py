"""LVBench (THUDM/LVBench): extreme long-video questions.

Official file: ``video_info.meta.jsonl``, one video per line: ``key`` (YouTube id; video
``videos/<key>.mp4``), ``type`` (genre), ``qa`` (``uid``, ``question`` with "(A) ..." option lines,
``answer`` letter, ``question_type`` — a list: key information retrieval, event understanding,
summarization, entity recognition, reasoning, temporal grounding). Metric: accuracy; a question counts
in every category of its list (official ``compute_accuracy``). EasyVideoR1's ``lvbench.json`` (no
categories) is read when the official file is absent.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from videorl.api import BenchmarkRow
from videorl_benchmarks.base import BaseBenchmark, letter_answer
from videorl_benchmarks.files import iter_qa, resolve_media, split_inline_options


class LVBench(BaseBenchmark):
    name = "lvbench"
    official_files = ("video_info.meta.jsonl",)
    unified_file = "lvbench.json"
    option_format = "({letter}) {text}"
    instructions: ClassVar[dict[str, str]] = {"multiple_choice": "Answer the question with the option letter"}

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        rows = []
        for video, qa in iter_qa(path):
            stem, options = split_inline_options(qa.text("question"))
            if not options:
                raise qa.error("question without '(A) ...' option lines")
            kinds = qa.get("question_type", [])
            kinds = [str(k) for k in (kinds if isinstance(kinds, list) else [kinds])]
            key = video.text("key")
            rows.append(
                BenchmarkRow(
                    id=qa.text("uid"),
                    problem=stem,
                    answer=letter_answer(qa, qa.text("answer"), len(options)),
                    video=resolve_media(root, [f"videos/{key}.mp4", f"{key}.mp4"]),
                    options=options,
                    categories={"question_type": kinds, "genre": video.text("type")},
                )
            )
        return rows
