"""Answer reading that the benchmarks need beyond :mod:`videorl.answers` (candidates for core).

- :func:`final_text`, :func:`choice_letter`: where the answer sits in a response, for every adapter;
- :func:`parse_span`: a time span from JSON or free text ("12.3 - 25.7 seconds", "00:12 to 00:25");
- :func:`relative_accuracy`: MRA with the inclusive threshold of VSI-Bench's official code (core's
  :func:`videorl.answers.mean_relative_accuracy` is EasyVideoR1's strict variant);
- :func:`yes_no`, :func:`digits`: TempCompass / OVO-Bench conventions.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from videorl.answers import (
    CHOICE_LETTERS,
    answer_candidates,
    box_iou,
    extract_choice,
    extract_tag,
    interval_iou,
    parse_json_answer,
)
from videorl.api import mean


def final_text(response: str) -> str:
    """The answer part of a response: the last ``<answer>`` content, else the final statement
    ("Therefore, the final answer is: X"), a ``\\boxed{}``, or the text after the reasoning."""
    tag = extract_tag(response)
    if tag is not None:
        return tag
    candidates = answer_candidates(response)
    return candidates[0] if candidates else ""


def lettered(options: Sequence[str]) -> list[str]:
    return [f"{CHOICE_LETTERS[i]}. {text}" for i, text in enumerate(options[: len(CHOICE_LETTERS)])]


def choice_letter(response: str, options: Sequence[str] | None) -> str | None:
    """The option letter a response answers with (``None`` when absent or ambiguous).

    Tried in order: the last ``<answer>`` content, the final statement, a ``\\boxed{}``, the text after
    the reasoning (see :func:`videorl.answers.extract_choice` for what is read in each).
    """
    if not response:
        return None
    labelled = lettered(options) if options else None
    tag = extract_tag(response)
    candidates = ([tag] if tag else []) + answer_candidates(response)
    for candidate in candidates:
        letter = extract_choice(candidate, labelled)
        if letter is not None:
            return letter
    return None


# --- time spans ------------------------------------------------------------------------------------

_TIME = r"(?:\d+:)?\d+:\d+(?:\.\d+)?|\d+(?:\.\d+)?"
_PAIR = re.compile(rf"({_TIME})\s*(?:s|sec|secs|seconds?)?\s*(?:-|–|—|~|to|and|until|till)\s*({_TIME})", re.I)
_START_END = re.compile(
    rf"(?:start\w*|begin\w*)\D{{0,20}}?({_TIME}).{{0,80}}?(?:end\w*|finish\w*|stop\w*)\D{{0,20}}?({_TIME})",
    re.I | re.S,
)


def seconds(value: str) -> float:
    """``"75.5"``, ``"01:15.5"`` or ``"00:01:15.5"`` as seconds."""
    total = 0.0
    for part in value.split(":"):
        total = total * 60 + float(part)
    return total


def _span_from_json(value: Any) -> list[float] | None:
    if isinstance(value, dict):
        value = value.get("time", value.get("span", value.get("timestamp")))
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], list):
        value = value[0]
    if isinstance(value, (list, tuple)) and len(value) == 2:
        try:
            a, b = float(value[0]), float(value[1])
        except (TypeError, ValueError):
            return None
        if math.isfinite(a) and math.isfinite(b):
            return [min(a, b), max(a, b)]
    return None


def parse_span(text: str | None) -> list[float] | None:
    """A ``[start, end]`` span in seconds from ``{"time": [s, e]}``, ``[s, e]`` or free text.

    Free text: the first "a - b" / "a to b" pair (seconds or ``mm:ss`` / ``hh:mm:ss``), else "starts at
    a ... ends at b". A reversed pair is swapped (as lmms-eval's Charades-STA parser does).
    """
    if not text:
        return None
    for value in (json_object(text), parse_json_answer(text)):
        span = _span_from_json(value)
        if span is not None:
            return span
    for pattern in (_PAIR, _START_END):
        match = pattern.search(text)
        if match:
            a, b = seconds(match.group(1)), seconds(match.group(2))
            return [min(a, b), max(a, b)]
    return None


# --- numbers, yes/no, counts -----------------------------------------------------------------------


def relative_accuracy(pred: float, truth: float) -> float:
    """MRA over θ ∈ {0.50, 0.55, …, 0.95}: the fraction with ``|pred − truth| / |truth| ≤ 1 − θ``.

    VSI-Bench's official (inclusive) rule; :func:`videorl.answers.mean_relative_accuracy` is EasyVideoR1's
    strict one. Non-finite inputs, and ``truth == 0`` with a non-zero prediction, give 0.
    """
    if not (math.isfinite(pred) and math.isfinite(truth)):
        return 0.0
    if truth == 0:
        return 1.0 if pred == 0 else 0.0
    rel = abs(pred - truth) / abs(truth)
    # a tolerance so that a relative error of exactly 0.05 meets θ = 0.95 despite rounding
    return sum(rel <= (100 - t) / 100 + 1e-12 for t in range(50, 100, 5)) / 10


_YES_NO = re.compile(r"\b(yes|no)\b", re.I)


def yes_no(text: str | None) -> str | None:
    """``"yes"``/``"no"``: how the answer starts, else the only one of the two words it contains."""
    if not text:
        return None
    head = text.strip().lower()
    for word in ("yes", "no"):
        if re.match(rf"{word}\b", head):
            return word
    words = {m.group(1).lower() for m in _YES_NO.finditer(text)}
    return words.pop() if len(words) == 1 else None


def digits(text: str | None) -> str:
    """All digits of ``text`` concatenated (OVO-Bench's REC rule)."""
    return "".join(re.findall(r"\d", text or ""))


# --- spatio-temporal grounding ---------------------------------------------------------------------


def _second_key(key: Any) -> str | None:
    try:
        value = float(key)
    except (TypeError, ValueError):
        return None
    return str(int(value)) if math.isfinite(value) else None


def json_object(text: str | None) -> dict[str, Any] | None:
    """The first JSON object in ``text`` (prose around it allowed; nested objects kept whole).

    :func:`videorl.answers.parse_json_answer` returns the last bracket that parses, which for
    ``{"time": [...], "boxes": {...}}`` inside prose is an inner list or object.
    """
    if not text:
        return None
    value = parse_json_answer(text)
    if isinstance(value, dict) and text.strip().endswith("}") and text.strip().startswith("{"):
        return value
    decoder = json.JSONDecoder()
    for match in list(re.finditer(r"\{", text))[:50]:
        try:
            found, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return value if isinstance(value, dict) else None


def parse_st_answer(text: str | None) -> dict[str, Any] | None:
    """``{"time": [s, e] | None, "boxes": {"<second>": [x1, y1, x2, y2]}}`` from a JSON answer."""
    value = json_object(text)
    if value is None:
        return None
    span = parse_span(str(value.get("time"))) if value.get("time") is not None else None
    boxes: dict[str, list[float]] = {}
    raw = value.get("boxes")
    if isinstance(raw, dict):
        for key, box in raw.items():
            second = _second_key(key)
            if second is not None and isinstance(box, list) and len(box) == 4:
                try:
                    boxes[second] = [float(v) for v in box]
                except (TypeError, ValueError):
                    continue
    if span is None and not boxes:
        return None
    return {"time": span, "boxes": boxes}


def st_score(prediction: Any, truth: Any) -> float:
    """EasyVideoR1's STVG score: 0.5 · tIoU + 0.5 · mean box IoU over the seconds present in both."""
    if not isinstance(prediction, dict) or not isinstance(truth, dict):
        return 0.0
    tiou = interval_iou(prediction.get("time"), truth.get("time"))
    truth_boxes = truth.get("boxes") or {}
    if not truth_boxes:
        return tiou
    pred_boxes = prediction.get("boxes") or {}
    common = [k for k in pred_boxes if k in truth_boxes]
    miou = mean(box_iou(pred_boxes[k], truth_boxes[k]) for k in common)
    return 0.5 * tiou + 0.5 * miou
