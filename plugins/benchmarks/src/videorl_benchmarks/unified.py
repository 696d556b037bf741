"""EasyVideoR1's unified evaluation records (``eval/data/valid_data/<name>.json`` in its repository).

Fields: ``problem_id``, ``problem`` (no options), ``options`` ("A. …" or "A: …" strings; empty for other
types), ``solution`` (``<answer>X</answer>``; Charades-STA puts its JSON inside ``<think>``), ``path``
(the video, relative to the benchmark's video root), ``problem_type`` ("multiple choice", "numerical",
"regression", "open-ended", "temporal grounding", "spatial-temporal grounding", OVO-Bench's "REC",
"SSR", "CRR"), optional ``image_path``, plus per-benchmark extras.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from videorl.api import BenchmarkRow, answers
from videorl_benchmarks.files import Record, read_records
from videorl_benchmarks.spatiotemporal import parse_st_answer

TYPES = {
    "multiple choice": "multiple_choice",
    "numerical": "numerical",
    "regression": "regression",
    "open-ended": "open_ended",
    "free-form": "open_ended",
    "ocr": "open_ended",
    "temporal grounding": "temporal_grounding",
    "spatial-temporal grounding": "spatial_temporal_grounding",
    "rec": "counting",
    "ssr": "yes_no",
    "crr": "yes_no",
}


def answer_from_solution(rec: Record, problem_type: str, solution: str, n_options: int) -> Any:
    """The ground truth of ``solution`` in the form the adapters' ``extract`` returns."""
    body = answers.extract_tag(solution)
    text = solution if body is None else body
    value: Any
    if problem_type == "multiple_choice":
        value = text.strip().strip("().").upper()
        if len(value) != 1 or value not in answers.CHOICE_LETTERS[: max(n_options, 1)]:
            raise rec.error(f"solution {solution!r} is not one of the {n_options} option letters")
    elif problem_type in ("numerical", "regression", "counting"):
        value = answers.parse_number(text)
    elif problem_type == "yes_no":
        value = answers.parse_boolean(text, leading_wins=True)
    elif problem_type == "temporal_grounding":
        value = answers.parse_interval(text, sort=True)
    elif problem_type == "spatial_temporal_grounding":
        value = parse_st_answer(text)
    else:
        value = text.strip() or None
    if value is None:
        raise rec.error(f"cannot read a {problem_type} answer from solution {solution!r}")
    return value


def unified_row(rec: Record, index: int, video_root: Path) -> BenchmarkRow:
    """One unified record as a row (categories and extras are the adapter's to add)."""
    raw_type = rec.text("problem_type")
    problem_type = TYPES.get(raw_type.strip().lower())
    if problem_type is None:
        raise rec.error(f"unknown problem_type {raw_type!r} (known: {', '.join(sorted(TYPES))})")
    options = [answers.strip_option_letter(o) for o in (rec.get("options") or [])] or None
    if problem_type == "multiple_choice" and not options:
        raise rec.error("a multiple-choice record needs 'options'")
    path = rec.text("path")
    row = BenchmarkRow(
        id=str(rec.get("problem_id", f"#{index}")),
        problem=rec.text("problem"),
        answer=answer_from_solution(rec, problem_type, rec.text("solution"), len(options or [])),
        problem_type=problem_type,
        video=os.path.normpath(video_root / path),
        options=options if problem_type == "multiple_choice" else None,
    )
    if rec.has("image_path"):
        row.image = os.path.normpath(video_root / str(rec.get("image_path")))
    return row


def read_unified(path: Path, video_root: Path) -> list[tuple[Record, BenchmarkRow]]:
    """Every record of a unified file with its row."""
    return [(rec, unified_row(rec, i, video_root)) for i, rec in enumerate(read_records(path))]
