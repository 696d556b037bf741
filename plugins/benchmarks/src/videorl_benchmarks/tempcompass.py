"""TempCompass (llyx97/TempCompass): multi-choice, yes/no and caption matching.

Official files: ``questions/{multi-choice,yes_no,caption_matching}.json``, each
``{video_id: {dimension: [{"question", "answer"}, ...]}}``; videos ``videos/<video_id>.mp4``.
Multi-choice questions carry their options ("A. ...") and answers are an option line ("B. ...");
yes/no answers are "yes"/"no"; caption-matching options are lines such as "Caption A: ..." /
"Sentence A: ..." / "Option 1: ..." and the answer is one of them. Prompts append the official
"Please directly give the best option:" / "Please answer yes or no:". Captioning (free captions judged
by an LLM) is not loaded. Reported: accuracy by task format and by temporal dimension (action, speed,
direction, order, attribute_change); overall = accuracy over all loaded questions.

Official figure: the official rule-based matching on the answer part of the response (TempCompass's
``eval_*.py`` as lmms-eval ports them): multi-choice, the answer equals the option line, is a bare
letter A–D, or starts with "A." / "A)"; yes/no, ``pred.lower().startswith("yes")`` / ``("no")``;
caption matching, the answer equals an option line, its sentence (also after "X) "), or its label
("Caption A", "A", a trailing "." ignored). The official ChatGPT fallback for the rest is not used:
they count as wrong, every row staying in the denominator. videorl's reading (a letter, an option's
text or label anywhere in the answer; yes/no also from "Definitely not.") is reported beside it.

EasyVideoR1's ``tempcompass.json`` (7,540 items, schema not seen: its file was too large to read) is
read through the unified schema when ``questions/`` is absent.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from videorl.api import BenchmarkRow, answers
from videorl_benchmarks.base import BaseBenchmark, letter_answer, official_text
from videorl_benchmarks.files import Record, read_json_object, split_inline_options
from videorl_benchmarks.prompts import thinking_ending

FORMATS = ("multi-choice", "yes_no", "caption_matching")
_SUFFIX = {
    "multi-choice": "Please directly give the best option:",
    "yes_no": "Please answer yes or no:",
    "caption_matching": "Please directly give the best option:",
}
_CAPTION_LINE = re.compile(r"^\s*((?:Caption|Sentence|Option)\s+[A-Z0-9]+)\s*:\s*(.+?)\s*$", re.I)


def _caption_options(rec: Record, question: str) -> tuple[str, list[str], list[str]]:
    stem, labels, options = [], [], []
    for line in question.splitlines():
        match = _CAPTION_LINE.match(line)
        if match:
            labels.append(match.group(1))
            options.append(match.group(2))
        elif not labels:
            stem.append(line)
    if len(options) < 2:
        raise rec.error(f"caption-matching question without 'Caption A: ...' option lines: {question!r}")
    return "\n".join(stem).strip(), labels, options


def official_choice(pred: str, options: list[str]) -> str | None:
    """The official multi-choice match: ``pred == doc["answer"]`` (an option line "B. text"), a bare
    letter in A–D, or ``pred.startswith("B.")`` / ``("B)")`` for a letter in A–D."""
    for i, text in enumerate(options):
        if pred == f"{chr(65 + i)}. {text}":
            return chr(65 + i)
    if pred in ("A", "B", "C", "D"):
        return pred
    if pred[:1] in ("A", "B", "C", "D") and pred[1:2] in (".", ")"):
        return pred[0]
    return None


def official_yes_no(pred: str) -> str | None:
    """The official yes/no rule: the lower-cased answer starts with "yes" or "no" ("Nope" is no)."""
    pred = pred.lower()
    return "yes" if pred.startswith("yes") else "no" if pred.startswith("no") else None


def official_caption(pred: str, labels: list[str], options: list[str]) -> str | None:
    """The official caption-matching ``eval_rule``: the last option whose line ("Caption A: text"),
    sentence (also the part after ") "), or label ("Caption A" or "A"; "." removed) ``pred`` equals, in
    the official order (lines, then sentences, then labels)."""
    after = pred.split(") ")[1] if ") " in pred else None
    found = None
    for i, (label, text) in enumerate(zip(labels, options, strict=True)):
        if pred == f"{label}: {text}":
            found = i
    for i, text in enumerate(options):
        if text in (pred, after):
            found = i
    bare = pred.replace(".", "")
    for i, label in enumerate(labels):
        short = label.split(" ", 1)[-1]  # "Caption A" → "A", "Option 1" → "1"
        if pred in (label, short) or bare in (label, short):
            found = i
    return None if found is None else chr(65 + found)


class TempCompass(BaseBenchmark):
    name = "tempcompass"
    official_files = ("questions",)
    unified_file = "tempcompass.json"
    aggregates_predictions = True

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        rows = []
        for fmt in FORMATS:
            file = path / f"{fmt}.json"
            if not file.is_file():
                continue
            for video_id, dims in read_json_object(file).items():
                if not isinstance(dims, dict):
                    raise Record({}, f"{file}: video {video_id!r}").error("expected {dimension: [questions]}")
                for dim, items in dims.items():
                    for i, item in enumerate(items if isinstance(items, list) else [items]):
                        where = f"{file}: video {video_id!r}, dimension {dim!r}, item {i}"
                        rec = Record(item if isinstance(item, dict) else {}, where)
                        rows.append(self._row(root, fmt, str(video_id), str(dim), i, rec))
        return rows

    def _row(self, root: Path, fmt: str, video_id: str, dim: str, i: int, rec: Record) -> BenchmarkRow:
        question, answer = rec.text("question"), rec.text("answer")
        row = BenchmarkRow(
            id=f"{fmt}/{video_id}/{dim}/{i}",
            problem=question,
            answer=None,
            video=str(root / "videos" / f"{video_id}.mp4"),
            categories={"format": fmt, "dimension": dim},
            extra={"question": question, "format": fmt},
        )
        if fmt == "yes_no":
            row.problem_type = "yes_no"
            row.answer = answer.strip().lower().rstrip(".")
            if row.answer not in ("yes", "no"):
                raise rec.error(f"yes/no answer {answer!r} is neither yes nor no")
        elif fmt == "multi-choice":
            row.problem, row.options = split_inline_options(question)
            if not row.options:
                raise rec.error(f"multi-choice question without 'A. ...' option lines: {question!r}")
            row.answer = letter_answer(rec, answer, len(row.options))
        else:
            row.problem, labels, row.options = _caption_options(rec, question)
            row.extra["labels"] = labels
            chosen = [i for i, label in enumerate(labels) if answer.lower().startswith(label.lower())]
            if len(chosen) != 1:
                raise rec.error(f"answer {answer!r} names none of {labels}")
            row.answer = chr(65 + chosen[0])
        return row

    def official_prompt(self, row: BenchmarkRow, *, thinking: bool) -> str:
        fmt = row.extra.get("format")
        if fmt not in _SUFFIX:
            return super().official_prompt(row, thinking=thinking)
        ending = thinking_ending(row.problem_type) if thinking else _SUFFIX[fmt]
        return f"{row.extra['question']}\n{ending}"

    def official_read(self, row: BenchmarkRow, response: str) -> Any:
        pred = official_text(response)
        labels: list[str] | None = row.extra.get("labels")
        if row.problem_type == "yes_no":
            return official_yes_no(pred)
        if labels and row.options:
            return official_caption(pred, labels, row.options)
        return official_choice(pred, row.options or [])

    def read_answer(self, row: BenchmarkRow, response: str) -> Any:
        labels: list[str] | None = row.extra.get("labels")
        if labels and row.options:
            text = answers.answer_text(response).lower()
            named = {i for i, label in enumerate(labels) if label.lower() in text}
            if len(named) == 1:
                return chr(65 + named.pop())
        return super().read_answer(row, response)
