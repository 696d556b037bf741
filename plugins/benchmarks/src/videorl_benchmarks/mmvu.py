"""MMVU (yale-nlp/MMVU): expert-level video understanding across 27 subjects, validation split.

Official file: ``validation.json``: ``id``, ``video`` (a Hugging Face URL; the local video is the part
from ``videos/``: ``videos/<Subject>/<n>.mp4``), ``question_type`` ("multiple-choice" | "open-ended"),
``metadata.subject``, ``question``, ``choices`` ({A..E}), ``answer`` (letter, or text for open-ended).

``mmvu`` loads the 625 multiple-choice questions (the "MMVU" of Video-R1 and EasyVideoR1);
``mmvu-all`` all 1,000, whose open-ended answers the official protocol judges with GPT-4o: give
``judge_score`` in the predictions, else the rule-based match applies. Prompts: the official direct
and chain-of-thought ones. Reported by subject and discipline (lmms-eval's mapping).
EasyVideoR1's ``mmvu.json`` / ``mmvu-all.json`` are read when ``validation.json`` is absent.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from videorl.api import BenchmarkRow
from videorl_benchmarks.base import BaseBenchmark, letter_answer
from videorl_benchmarks.files import Record, read_records

DISCIPLINES = {
    **dict.fromkeys(
        ["Biology", "Chemistry", "Modern_Physics", "Astronomy", "Geography", "Materials_Science",
         "Neurobiology", "Electromagnetism", "Thermodynamics", "Mechanics"],
        "Science",
    ),
    **dict.fromkeys(
        ["Civil_Engineering", "Electrical_Engineering", "Mechanical_Engineering", "Biomedical_Engineering",
         "Electronics_and_Communication", "Computer_Science"],
        "Engineering",
    ),
    **dict.fromkeys(
        ["Clinical_Medicine", "Basic_Medicine", "Preventive_Medicine", "Pharmacy", "Dentistry"], "Healthcare"
    ),
    **dict.fromkeys(
        ["Art", "Literature", "History", "Law", "Economics", "Management"], "Humanities_and_Social_Science"
    ),
}  # fmt: skip

_VISUAL = "Visual Information: processed video"


def _subject_categories(subject: str) -> dict[str, str | list[str]]:
    return {"subject": subject, "discipline": DISCIPLINES.get(subject, "other")}


class MMVU(BaseBenchmark):
    """MMVU, multiple-choice questions only."""

    name = "mmvu"
    official_files = ("validation.json",)
    unified_file = "mmvu.json"
    include_open_ended = False
    question_label = "Question:"
    option_format = "{letter}: {text}"
    instructions: ClassVar[dict[str, str]] = {
        "multiple_choice": f"{_VISUAL}\nDo not generate any intermediate reasoning process. Answer directly "
        "with "
        "the option letter from the given choices.",
        "open_ended": f"{_VISUAL}\nDo not generate any intermediate reasoning process. Directly output the "
        "final "
        "answer.",
    }
    thinking_instructions: ClassVar[dict[str, str]] = {
        "multiple_choice": f"{_VISUAL}\nAnswer the given multiple-choice question step by step. Begin by "
        "explaining your reasoning process clearly. Conclude by stating the final answer using the following "
        'format: "Therefore, the final answer is: $LETTER" (without quotes), where $LETTER is one of the '
        "options. Think step by step before answering.",
        "open_ended": f"{_VISUAL}\nAnswer the given question step by step. Begin by explaining your "
        "reasoning "
        'process clearly. Conclude by stating the final answer using the following format: "Therefore, the '
        'final answer is: "Answer: $ANSWER" (without quotes), where $ANSWER is the final answer of the '
        "question. Think step by step before answering.",
    }

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        rows = []
        for rec in read_records(path):
            kind = rec.text("question_type")
            if kind not in ("multiple-choice", "open-ended"):
                raise rec.error(f"unknown question_type {kind!r}")
            if kind == "open-ended" and not self.include_open_ended:
                continue
            url = rec.text("video")
            local = url[url.index("videos/") :] if "videos/" in url else url
            metadata = rec.get("metadata", {})
            subject = str(metadata.get("subject", "")) if isinstance(metadata, dict) else ""
            row = BenchmarkRow(
                id=rec.text("id"),
                problem=rec.text("question"),
                answer=rec.text("answer"),
                problem_type="open_ended",
                video=str(root / local),
                categories=_subject_categories(subject) | {"question_type": kind},
            )
            if kind == "multiple-choice":
                choices = rec.get("choices")
                if not isinstance(choices, dict):
                    raise rec.error("field 'choices' must be an object {letter: text}")
                texts = [str(choices[k]) for k in sorted(choices)]
                while texts and not texts[-1].strip():
                    texts.pop()
                row.problem_type, row.options = "multiple_choice", texts
                row.answer = letter_answer(rec, row.answer, len(texts))
            rows.append(row)
        return rows

    def adapt_unified(self, rec: Record, row: BenchmarkRow) -> BenchmarkRow:
        parts = Path(rec.text("path")).parts
        if len(parts) >= 2:
            row.categories.update(_subject_categories(parts[-2]))
        return row


class MMVUAll(MMVU):
    """MMVU with its open-ended questions (judge them; see the module docstring)."""

    name = "mmvu-all"
    unified_file = "mmvu-all.json"
    include_open_ended = True
