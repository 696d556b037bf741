"""What every adapter shares: loading checks, prompts per family, extraction and scoring per problem type.

An adapter subclasses :class:`BaseBenchmark`, sets ``name``, implements :meth:`BaseBenchmark.read` and
describes its official prompt with class attributes; it overrides ``read_answer``/``score_reading``/
``summarize`` only where its official protocol differs from the shared rules below.

Two readings: where the official scorer reads answers differently from these rules (Video-MME's first
letter, VSI-Bench's first word, TempCompass's exact matches), the adapter implements
:meth:`BaseBenchmark.official_read` and sets ``aggregates_predictions``. A prediction is then
``{"official": …, "videorl": …}``, a row's score is the official reading's, and the summary's
``overall`` is the official figure (with the official denominator: ``official_leaves_out_unread``);
``metrics`` adds the same figure from videorl's reading over every row and ``readings`` counts the rows
the official figure counts and those read differently.

Shared rules per ``problem_type`` (extraction → score):

- ``multiple_choice``: the option letter (:func:`videorl.answers.answer_choice`) → exact match;
- ``numerical``: the one number of the final answer → equal after rounding to 2 decimals;
- ``regression``: the number → mean relative accuracy as VSI-Bench's official code computes it
  (inclusive, float thresholds);
- ``counting``: the number → exact match;
- ``yes_no``: ``"yes"``/``"no"``, the first word deciding (TempCompass) → exact match;
- ``temporal_grounding``: a ``[start, end]`` span in seconds (a reversed one swapped) → temporal IoU;
- ``spatial_temporal_grounding``: ``{"time": [s, e], "boxes": {"<second>": [x1, y1, x2, y2]}}`` →
  0.5 · tIoU + 0.5 · mean box IoU over the seconds in both (tIoU alone when the truth has no boxes);
- ``open_ended``: the final answer text → a rule-based match (normalised equality, the truth contained in
  the answer, or equal numbers); official protocols use an LLM judge, whose ``judge_score`` in the
  predictions file replaces this score (:mod:`videorl.eval.scoring`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

from videorl.api import BenchmarkRow, DataError, answers, benchmark_summary, breakdown, mean
from videorl_benchmarks.files import Record, find, missing, require_dir
from videorl_benchmarks.prompts import IMAGE_HINT, evr1_question, family_prompt, prompt_style, thinking_ending
from videorl_benchmarks.spatiotemporal import parse_st_answer, st_score
from videorl_benchmarks.unified import read_unified

PROBLEM_TYPES = (
    "multiple_choice",
    "numerical",
    "regression",
    "counting",
    "yes_no",
    "temporal_grounding",
    "spatial_temporal_grounding",
    "open_ended",
)


class BaseBenchmark:
    """A benchmark adapter with the shared rules; see the module docstring."""

    name: ClassVar[str] = ""
    #: the name of the ``overall`` figure
    metric: ClassVar[str] = "accuracy"
    #: set by an adapter with an official reading (:meth:`official_read`); see the module docstring
    aggregates_predictions: ClassVar[bool] = False
    #: whether the official scorer leaves a row it reads no answer from out of its denominator
    official_leaves_out_unread: ClassVar[bool] = False
    #: the figures that are the share of their rows scored 1, for their interval (Wilson; the others
    #: are bootstrapped): the overall accuracy and each category's (see ``videorl.api.Benchmark``)
    proportions: ClassVar[tuple[str, ...]] = ("overall", "categories")

    #: the official annotation file(s), relative to the data root (globs allowed), first found wins
    official_files: ClassVar[tuple[str, ...]] = ()
    #: EasyVideoR1's unified file for this benchmark, read when no official file is found
    unified_file: ClassVar[str | None] = None
    unified_categories: ClassVar[dict[str, str]] = {}

    # the official prompt: [preamble] [question_label + question] [options_header] [options] [instruction]
    preamble: ClassVar[str] = ""
    question_label: ClassVar[str] = ""
    options_header: ClassVar[str] = ""
    option_format: ClassVar[str] = "{letter}. {text}"
    instructions: ClassVar[dict[str, str]] = {
        "multiple_choice": "Answer with the option's letter from the given choices directly.",
        "numerical": "Please answer the question using a single word or phrase.",
        "regression": "Please answer the question using a single word or phrase.",
        "counting": "Answer with a single number.",
        "yes_no": "Please answer yes or no.",
    }
    #: the official reasoning variant's ending per problem type (default: EasyVideoR1's thinking ending)
    thinking_instructions: ClassVar[dict[str, str]] = {}

    # --- loading ----------------------------------------------------------------------------------

    def load(self, data_root: Path) -> list[BenchmarkRow]:
        """Rows from the files under ``data_root`` (see :meth:`read`), checked for unique ids."""
        root = require_dir(data_root, self.name)
        rows = self.read(root)
        if not rows:
            raise DataError(f"{self.name}: no questions found under {root}")
        seen: set[str] = set()
        for row in rows:
            if row.id in seen:
                raise DataError(f"{self.name}: question id {row.id!r} appears twice under {root}")
            if row.problem_type not in PROBLEM_TYPES:
                raise DataError(
                    f"{self.name}: question {row.id!r} has unknown problem type {row.problem_type!r}"
                )
            seen.add(row.id)
        return rows

    def read(self, root: Path) -> list[BenchmarkRow]:
        """Rows from the official files under ``root`` if present, else from EasyVideoR1's unified file."""
        official = find(root, self.official_files) if self.official_files else None
        if official is not None:
            return self.read_official(root, official)
        if self.unified_file and (root / self.unified_file).is_file():
            return [self.adapt_unified(rec, row) for rec, row in read_unified(root / self.unified_file, root)]
        raise missing(
            self.name, root, [*self.official_files, *([self.unified_file] if self.unified_file else [])]
        )

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        """Rows from the official annotation file ``path`` (the first of ``official_files`` found)."""
        raise NotImplementedError(f"{self.name} reads no official files")

    def adapt_unified(self, rec: Record, row: BenchmarkRow) -> BenchmarkRow:
        """Add the categories named by ``unified_categories`` (EasyVideoR1 field → category kind)."""
        for field, kind in self.unified_categories.items():
            if rec.has(field):
                row.categories[kind] = str(rec.get(field))
        return row

    # --- prompts ----------------------------------------------------------------------------------

    def build_prompt(self, row: BenchmarkRow, *, family: str | None, thinking: bool) -> str:
        style = prompt_style(family)
        if style is None:
            return self.official_prompt(row, thinking=thinking)
        return family_prompt(
            style,
            evr1_question(row.problem, row.options),
            row.problem_type,
            thinking=thinking,
            image_hint=IMAGE_HINT if row.image else "",
        )

    def format_options(self, options: list[str]) -> list[str]:
        return [self.option_format.format(letter=chr(65 + i), text=text) for i, text in enumerate(options)]

    def official_prompt(self, row: BenchmarkRow, *, thinking: bool) -> str:
        """The benchmark's own wording; thinking mode ends with a reasoning request and answer format."""
        parts = [self.preamble] if self.preamble else []
        parts.append(self.question_label + row.problem)
        if row.options:
            if self.options_header:
                parts.append(self.options_header)
            parts += self.format_options(row.options)
        if thinking:
            ending = self.thinking_instructions.get(row.problem_type) or thinking_ending(row.problem_type)
        else:
            ending = self.instructions.get(row.problem_type, "")
        if ending:
            parts.append(ending)
        return "\n".join(parts)

    # --- extraction and scoring ---------------------------------------------------------------------

    def extract(self, row: BenchmarkRow, response: str) -> Any:
        """videorl's reading (:meth:`read_answer`), with the official one beside it where it differs."""
        mine = self.read_answer(row, response)
        if not self.aggregates_predictions:
            return mine
        return {"official": self.official_read(row, response), "videorl": mine}

    def read_answer(self, row: BenchmarkRow, response: str) -> Any:
        """The answer in ``response`` by the shared rules of ``row.problem_type``."""
        kind = row.problem_type
        if kind == "multiple_choice":  # options are bare texts: lettered by position, never re-parsed
            return answers.answer_choice(response, dict(zip(answers.CHOICE_LETTERS, row.options or ())))
        text = answers.answer_text(response)
        if kind == "temporal_grounding":  # JSON anywhere counts (EasyVideoR1 reads it even inside <think>)
            return answers.parse_interval(text, sort=True) or answers.parse_interval(response, sort=True)
        if kind == "spatial_temporal_grounding":
            return parse_st_answer(text) or parse_st_answer(response)
        if kind in ("numerical", "regression", "counting"):
            return answers.parse_number(text)
        if kind == "yes_no":
            return answers.parse_boolean(text, leading_wins=True)
        return text.strip() or None

    def official_read(self, row: BenchmarkRow, response: str) -> Any:
        """The official scorer's reading of ``response`` (``None``: it reads no answer); adapters that set
        ``aggregates_predictions`` implement it on :func:`official_text`."""
        raise NotImplementedError(f"{self.name} has no official reading of its own")

    def score(self, row: BenchmarkRow, prediction: Any) -> float:
        """The official score: of the official reading where the prediction carries both."""
        if self.aggregates_predictions and isinstance(prediction, dict) and "official" in prediction:
            prediction = prediction["official"]
        return self.score_reading(row, prediction)

    def score_reading(self, row: BenchmarkRow, prediction: Any) -> float:
        """The score of one reading of the answer, by the shared rule of ``row.problem_type``."""
        if prediction is None:
            return 0.0
        kind, truth = row.problem_type, row.answer
        if kind == "temporal_grounding":
            return answers.interval_iou(prediction, truth)
        if kind == "spatial_temporal_grounding":
            return st_score(prediction, truth)
        if kind == "regression":
            return answers.mean_relative_accuracy(
                float(prediction), float(truth), inclusive=True, float_thresholds=True
            )
        if kind == "numerical":
            return float(round(float(prediction), 2) == round(float(truth), 2))
        if kind == "counting":
            return float(float(prediction) == float(truth))
        if kind == "open_ended":
            return float(open_match(str(prediction), str(truth)))
        return float(prediction == truth)

    def aggregate(
        self, rows: list[BenchmarkRow], scores: list[float], predictions: list[Any] | None = None
    ) -> dict[str, Any]:
        """The official summary (:meth:`summarize`); with both readings in ``predictions``, over the rows
        the official scorer counts, with videorl's reading's figure and the counts beside it."""
        if predictions is None or not self.aggregates_predictions:
            return self.summarize(rows, scores)
        counted: list[int] = []
        mine: list[float] = []
        differ = 0
        for i, (row, score, prediction) in enumerate(zip(rows, scores, predictions, strict=True)):
            if not isinstance(prediction, dict):  # a failed row (or one scored before two readings)
                counted.append(i)
                mine.append(score)
                continue
            official, videorl = prediction.get("official"), prediction.get("videorl")
            if official is not None or not self.official_leaves_out_unread:
                counted.append(i)
            mine.append(self.score_reading(row, videorl))
            differ += official != videorl
        summary = self.summarize([rows[i] for i in counted], [scores[i] for i in counted])
        other = self.summarize(rows, mine)["overall"]
        summary.setdefault("metrics", {})[f"{self.metric}, videorl's reading"] = other
        summary["readings"] = {"counted": len(counted), "differ": differ}
        return summary

    def summarize(self, rows: list[BenchmarkRow], scores: list[float]) -> dict[str, Any]:
        """Overall = the mean score; one breakdown per category kind."""
        return benchmark_summary(mean(scores), breakdown(rows, scores), metric=self.metric)


def official_text(response: str) -> str:
    """What an official scorer is given: the last ``<answer>`` content, else the response after its
    reasoning (``</think>``), stripped; the official scripts read a plain answer, not a reasoning trace."""
    tagged = answers.extract_tag(response)
    return tagged if tagged is not None else answers.strip_think(response)


# --- open-ended ------------------------------------------------------------------------------------


def _normal(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s.]", " ", text.casefold()).split()).strip(" .")


def open_match(prediction: str, truth: str) -> bool:
    """Rule-based open-answer match: equal after normalisation, truth inside the answer, or equal numbers."""
    pred, gold = _normal(prediction), _normal(truth)
    if not pred or not gold:
        return False
    if pred == gold or f" {gold} " in f" {pred} ":
        return True
    a, b = answers.parse_number(prediction), answers.parse_number(truth)
    return a is not None and b is not None and abs(a - b) < 0.01


# --- ground truth of multiple-choice rows ------------------------------------------------------------


def letter_answer(rec: Record, value: Any, n_options: int) -> str:
    """A ground-truth letter given as ``"B"``, ``"(B)"`` or ``"B. text"``, checked against the options."""
    match = re.match(r"^\s*\(?([A-Ja-j])\b", str(value))
    letter = match.group(1).upper() if match else ""
    if not letter or ord(letter) - 65 >= n_options:
        raise rec.error(f"answer {value!r} is not one of the {n_options} option letters")
    return letter


def index_answer(rec: Record, value: Any, n_options: int) -> str:
    """A ground truth given as a 0-based option index."""
    try:
        index = int(value)
    except (TypeError, ValueError):
        index = -1
    if not 0 <= index < n_options:
        raise rec.error(f"answer index {value!r} is not in 0..{n_options - 1}")
    return chr(65 + index)


def text_answer(rec: Record, value: Any, options: list[str]) -> str:
    """A ground truth given as the text of one option."""
    text = str(value).strip()
    for i, option in enumerate(options):
        if option.strip() == text:
            return chr(65 + i)
    raise rec.error(f"answer {value!r} is not one of the options {options}")
