"""Answer parsing shared by rewards and benchmark adapters: tags, ``\\boxed{}``, choice letters, numbers,
yes/no, time spans, JSON, IoU and relative accuracy.

Every function is pure, never raises on model output (malformed text gives ``None`` or ``0.0``) and is
linear in the length of its input, so a 1 MB response costs milliseconds.

Which ``<answer>`` counts: the **last** complete ``<answer>…</answer>`` pair. With nested or repeated
tags (``<answer>A</answer><answer>B</answer>``, ``<answer><answer>B</answer>``) that is the innermost
opening tag before the last closing tag (``B`` in both examples). Spacing and case inside tag brackets are
repaired first (``< /Answer >`` reads as ``</answer>``); the text between tags is left untouched.

The functions live in :mod:`~videorl.answers.text` (where the answer sits),
:mod:`~videorl.answers.choice` (option letters), :mod:`~videorl.answers.values` (numbers, yes/no, JSON,
time spans) and :mod:`~videorl.answers.measures` (IoU, box conventions, relative accuracy); import them
from here.
"""

from videorl.answers.choice import (
    CHOICE_LETTERS,
    Options,
    answer_choice,
    extract_choice,
    option_map,
    strip_option_letter,
)
from videorl.answers.measures import (
    BOX_CONVENTIONS,
    MRA_FLOAT_THRESHOLDS,
    MRA_THRESHOLDS,
    box_iou,
    convert_box,
    interval_iou,
    mean_relative_accuracy,
)
from videorl.answers.text import (
    answer_candidates,
    answer_text,
    extract_boxed,
    extract_tag,
    final_statement,
    normalize_tags,
    strip_math_delimiters,
    strip_think,
)
from videorl.answers.values import (
    parse_boolean,
    parse_interval,
    parse_json_answer,
    parse_number,
    parse_seconds,
)

__all__ = [
    "BOX_CONVENTIONS",
    "CHOICE_LETTERS",
    "MRA_FLOAT_THRESHOLDS",
    "MRA_THRESHOLDS",
    "Options",
    "answer_candidates",
    "answer_choice",
    "answer_text",
    "box_iou",
    "convert_box",
    "extract_boxed",
    "extract_choice",
    "extract_tag",
    "final_statement",
    "interval_iou",
    "mean_relative_accuracy",
    "normalize_tags",
    "option_map",
    "parse_boolean",
    "parse_interval",
    "parse_json_answer",
    "parse_number",
    "parse_seconds",
    "strip_math_delimiters",
    "strip_option_letter",
    "strip_think",
]
