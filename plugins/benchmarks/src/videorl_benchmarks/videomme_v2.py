"""Video-MME-v2 (MME-Benchmarks/Video-MME-v2), with its group-level non-linear scoring.

Official file: ``test.parquet`` (or the same rows as ``test.jsonl`` / ``test.json``), read as VLMEvalKit's
``videommev2.py`` reads it: ``video_id``, ``question_id``, ``question``, ``options`` (a newline-joined
"A. ..." string, or a list), ``answer`` (letter, up to H), ``group_type`` (relevance | logic),
``group_structure`` ("[1, 2, 3, 4]", "[1, [2, 3], 4]", "[[1, 2], 3, 4]"), ``level``, ``second_head``,
``third_head``. Every 4 consecutive rows form a group. Videos ``video/<video_id, 3 digits>.mp4``.

Scoring (VLMEvalKit): a relevance group scores by its number of correct answers, 0/1/2/3/4 → 0, 1/16,
4/16, 9/16, 1; a logic group by the length of its run of correct answers from the first question, with
the structure's map (``[1,2,3,4]`` as relevance; ``[1,[2,3],4]`` → 0, 1/12, 4/12, 7/12, 1, where Q3
right after Q1 extends the run; ``[[1,2],3,4]`` → 0, 1/10, 2/10, 5/10, 1, where Q2 alone starts it).
Overall = mean group score; by level, second and third head (over groups). EasyVideoR1 ships no file
for it.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, ClassVar

from videorl.api import BenchmarkRow, DataError, answers, benchmark_summary, mean
from videorl_benchmarks.base import BaseBenchmark, letter_answer
from videorl_benchmarks.files import read_records, resolve_media, split_inline_options

GROUP_SIZE = 4
_SQUARES = {0: 0.0, 1: 1 / 16, 2: 4 / 16, 3: 9 / 16, 4: 1.0}
_LOGIC_MAPS: dict[str, dict[int, float]] = {
    "[1, 2, 3, 4]": _SQUARES,
    "[1, [2, 3], 4]": {0: 0.0, 1: 1 / 12, 2: 4 / 12, 3: 7 / 12, 4: 1.0},
    "[[1, 2], 3, 4]": {0: 0.0, 1: 1 / 10, 2: 2 / 10, 3: 5 / 10, 4: 1.0},
}
_CATEGORY_KEYS = ("level", "second_head", "third_head")


def _structure(value: Any) -> str | None:
    try:
        return str(ast.literal_eval(str(value))).replace("'", "")
    except (ValueError, SyntaxError):
        return None


def group_score(correct: list[bool], group_type: str, structure: str) -> float:
    """The score of one group of four answers (``correct`` in question order)."""
    if group_type == "relevance":
        return _SQUARES[sum(correct)]
    run = 0
    while run < len(correct) and correct[run]:
        run += 1
    if structure == "[1, [2, 3], 4]" and run == 1 and correct[2]:
        run = 2
    elif structure == "[[1, 2], 3, 4]" and run == 0 and correct[1]:
        run = 1
    return _LOGIC_MAPS[structure][run]


class VideoMMEv2(BaseBenchmark):
    name = "video-mme-v2"
    metric = "group score"
    resample_group = "group"  # a group of four is scored together (eval intervals resample whole groups)
    proportions = ()  # group scores, and rows of a group are not independent
    official_files = ("test.parquet", "*.parquet", "test.jsonl", "test.json")
    preamble = "These are the frames of a video."
    question_label = "Question: "
    instructions: ClassVar[dict[str, str]] = {
        "multiple_choice": "Select the best answer to the following multiple-choice question based on the "
        "video. "
        "Respond with only the letter (A, B, C, D, E, F, G, or H) of the correct option."
    }
    thinking_instructions: ClassVar[dict[str, str]] = {
        "multiple_choice": "Please perform a detailed reasoning based on the provided video frames to answer "
        "the "
        "following multiple-choice question selecting the best option from A through H and providing your "
        "final response strictly in the format: 'Final Answer: <letter>."
    }

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        records = read_records(path)
        if len(records) % GROUP_SIZE:
            raise DataError(
                f"{path}: {len(records)} rows, not a multiple of {GROUP_SIZE} (one group = 4 rows)"
            )
        rows = []
        for index, rec in enumerate(records):
            raw = rec.get("options")
            options = (
                [answers.strip_option_letter(o) for o in rec.items("options")]
                if not isinstance(raw, str)
                else split_inline_options(raw)[1]
            )
            if not options:
                raise rec.error(f"cannot read options from {raw!r}")
            group_type, structure = rec.text("group_type"), _structure(rec.get("group_structure"))
            if group_type not in ("relevance", "logic") or (
                group_type == "logic" and structure not in _LOGIC_MAPS
            ):
                raise rec.error(
                    f"unknown group type {group_type!r} / structure {rec.get('group_structure')!r}"
                )
            video = (
                str(int(rec.text("video_id"))).zfill(3)
                if rec.text("video_id").isdigit()
                else rec.text("video_id")
            )
            categories: dict[str, str | list[str]] = {
                k: rec.text(k)
                for k in _CATEGORY_KEYS
                if rec.has(k) and str(rec.get(k)) not in ("None", "nan")
            }
            rows.append(
                BenchmarkRow(
                    id=rec.text("question_id"),
                    problem=rec.text("question"),
                    answer=letter_answer(rec, rec.text("answer"), len(options)),
                    video=resolve_media(root, [f"video/{video}.mp4", f"videos/{video}.mp4"]),
                    options=options,
                    categories=categories | {"group_type": group_type},
                    extra={"group": index // GROUP_SIZE, "group_structure": structure},
                )
            )
        return rows

    def summarize(self, rows: list[BenchmarkRow], scores: list[float]) -> dict[str, Any]:
        groups: dict[int, list[tuple[BenchmarkRow, float]]] = {}
        for row, score in zip(rows, scores, strict=True):
            groups.setdefault(int(row.extra["group"]), []).append((row, score))
        per_kind: dict[str, dict[str, list[float]]] = {}
        totals: list[float] = []
        linear: list[float] = []
        for members in groups.values():
            last = members[-1][0]
            group_type = str(last.categories["group_type"])
            correct = [s >= 1.0 for _, s in members]
            value = group_score(correct, group_type, str(last.extra["group_structure"]))
            totals.append(value)
            if group_type == "relevance":
                linear.append(sum(correct) / GROUP_SIZE)
            for kind, label in last.categories.items():
                per_kind.setdefault(kind, {}).setdefault(str(label), []).append(value)
        categories = {k: {v: mean(s) for v, s in sorted(vals.items())} for k, vals in per_kind.items()}
        metrics = {"question accuracy": mean(scores)}
        if linear:
            metrics["relevance linear score"] = mean(linear)
        return benchmark_summary(mean(totals), categories, metric=self.metric, metrics=metrics)
