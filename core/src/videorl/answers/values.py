"""Values stated in answer text: numbers, yes/no, JSON and time spans."""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

from videorl.answers.text import strip_math_delimiters

# --- numbers -----------------------------------------------------------------------------------

_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}  # fmt: skip
_TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
    "ninety": 90,
}  # fmt: skip
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}

_NUMBER = re.compile(
    r"\\[dt]?frac\{\s*([-+]?\d+(?:\.\d+)?)\s*\}\{\s*([-+]?\d+(?:\.\d+)?)\s*\}"  # \frac{a}{b}
    r"|([-+]?\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)(?![\d.])"  # a/b
    r"|([-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+)(?:[eE]([-+]?\d+))?(\s*(?:%|\\%|percent\b))?"
)
_WORD = re.compile(r"[a-z]+")


def _word_numbers(text: str) -> list[float]:
    """Values of runs of English number words ("twenty five", "one hundred and five")."""
    values: list[float] = []
    total = current = 0
    in_run = False
    for token in _WORD.findall(text.casefold().replace("-", " ")):
        if token in _UNITS:
            current += _UNITS[token]
        elif token in _TENS:
            current += _TENS[token]
        elif token in _SCALES and in_run:
            scale = _SCALES[token]
            if scale == 100:
                current *= 100
            else:
                total += current * scale
                current = 0
        elif token == "and" and in_run:
            continue
        else:
            if in_run:
                values.append(float(total + current))
            total = current = 0
            in_run = False
            continue
        in_run = True
    if in_run:
        values.append(float(total + current))
    return values


def parse_number(text: Any) -> float | None:
    """The one number ``text`` states, or ``None`` when it states none or several different ones.

    Reads integers and decimals (``1,234.5``, ``-3``, ``.5``, ``1e-3``), fractions (``3/4``,
    ``\\frac{3}{4}``), percentages (``50%`` → 0.5) and English number words up to the millions
    (``twenty-five``). ``"5 (five)"`` is one number; ``"3 or 4"`` is ambiguous. Non-finite values give
    ``None``.
    """
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return float(text) if math.isfinite(text) else None
    if not isinstance(text, str):
        return None
    text = strip_math_delimiters(text)
    values: list[float] = []
    rest = []
    last = 0
    for m in _NUMBER.finditer(text):
        rest.append(text[last : m.start()])
        last = m.end()
        try:
            if m.group(1) is not None:
                value = float(m.group(1)) / float(m.group(2))
            elif m.group(3) is not None:
                value = float(m.group(3)) / float(m.group(4))
            else:
                value = float(m.group(5).replace(",", ""))
                if m.group(6):
                    value *= 10.0 ** int(m.group(6)[:6])
                if m.group(7):
                    value /= 100.0
        except (ZeroDivisionError, OverflowError, ValueError):
            return None
        values.append(value)
    rest.append(text[last:])
    values += _word_numbers(" ".join(rest))
    distinct = {round(v, 12) for v in values}
    if len(distinct) != 1:
        return None
    value = values[0]
    return value if math.isfinite(value) else None


# --- yes / no ----------------------------------------------------------------------------------

_YES, _NO = "yes|yeah|yep|yup", "no|nope|nah"  # the spoken words of each polarity
_YES_WORDS, _NO_WORDS = ("true", "y", "1", *_YES.split("|")), ("false", "n", "0", *_NO.split("|"))
_BOOLEAN_WORDS = dict.fromkeys(_YES_WORDS, "yes") | dict.fromkeys(_NO_WORDS, "no")
_SPOKEN_BOOLEAN = re.compile(rf"\b({_YES}|{_NO}|true|false)\b", re.IGNORECASE)
_WORD_YES, _WORD_NO = (
    re.compile(rf"\b(?:{_YES})\b", re.IGNORECASE),
    re.compile(rf"\b(?:{_NO})\b", re.IGNORECASE),
)
_SPOKEN_YES, _SPOKEN_NO = (
    re.compile(rf"\b(?:{_YES}|true)\b", re.IGNORECASE),
    re.compile(rf"\b(?:{_NO}|false)\b", re.IGNORECASE),
)
#: a short answer that is a bare negation: "Not.", "Definitely not.", "Of course not", "Not at all"
_NEGATION = re.compile(
    r"(?:(?:definitely|certainly|absolutely|surely|clearly|obviously|of course) )?not(?: at all)?"
)


def parse_boolean(text: Any, *, leading_wins: bool = False) -> str | None:
    """``"yes"`` or ``"no"``, or ``None`` when ``text`` states neither or both.

    In order: the whole text is one of yes/no/true/false/y/n/1/0/yeah/yep/yup/nope/nah (punctuation
    ignored) or a bare negation ("Definitely not.", "Not at all"); the word it starts with ("No, it is not
    true." → no, "Nope, …" → no), unless words of both polarities occur; the one polarity its yes/no/true/
    false words share. ``leading_wins=True`` lets the first word decide even when both occur ("yes and
    no" → yes), TempCompass's official rule; by default that is a hedge (rewards).
    """
    if isinstance(text, bool):
        return "yes" if text else "no"
    text = str(text)
    if len(text.strip()) <= 32:  # a longer text is no single word or short phrase
        words = re.findall(r"\w+", text.casefold())
        if len(words) == 1 and words[0] in _BOOLEAN_WORDS:
            return _BOOLEAN_WORDS[words[0]]
        if _NEGATION.fullmatch(" ".join(words)):
            return "no"
    first = _SPOKEN_BOOLEAN.match(text.lstrip())
    if first and (leading_wins or not (_WORD_YES.search(text) and _WORD_NO.search(text))):
        return _BOOLEAN_WORDS[first.group(1).casefold()]
    yes, no = _SPOKEN_YES.search(text) is not None, _SPOKEN_NO.search(text) is not None
    return None if yes == no else "yes" if yes else "no"


# --- structured (JSON) answers -----------------------------------------------------------------

_MAX_JSON_CHARS = 200_000


def parse_json_answer(text: str | None) -> Any:
    """The JSON value in ``text``: the whole text, else the last top-level balanced ``{…}``/``[…]`` that
    parses (brackets inside strings are not told apart).

    Code fences are ignored and Python-style literals (single quotes) are accepted. Texts longer than
    200,000 characters and nesting too deep give ``None``.
    """
    if not text or len(text) > _MAX_JSON_CHARS:
        return None
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", text.strip())
    whole = _loads(text)
    if whole is not None:
        return whole
    for start, end in reversed(_top_level_spans(text)[-20:]):
        value = _loads(text[start : end + 1])
        if value is not None:
            return value
    return None


def _top_level_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each balanced ``{…}`` or ``[…]`` not inside another, in one pass (an opening
    bracket that never closes does not hide what follows it)."""
    spans: list[tuple[int, int]] = []
    stack: list[tuple[str, int]] = []
    pairs = {"}": "{", "]": "["}
    for i, ch in enumerate(text):
        if ch in "{[":
            stack.append((ch, i))
        elif ch in pairs and stack and stack[-1][0] == pairs[ch]:
            _, start = stack.pop()
            while spans and spans[-1][0] > start:
                spans.pop()
            spans.append((start, i))
    return spans


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    if len(text) <= 20_000 and text[:1] in "{[":
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
    return None


# --- time spans ----------------------------------------------------------------------------------

_TIME = r"(?:\d+:)?\d+:\d+(?:\.\d+)?|\d+(?:\.\d+)?"
_SPAN_TEXTS = (
    re.compile(
        rf"({_TIME})\s*(?:s|sec|secs|seconds?)?\s*(?:-|–|—|~|to|and|until|till)\s*({_TIME})", re.IGNORECASE
    ),
    re.compile(  # "starts at 3.5 s ... ends at 8 s"
        rf"\b(?:start|begin)\w*\D{{0,20}}?({_TIME}).{{0,80}}?\b(?:end|finish|stop)\w*\D{{0,20}}?({_TIME})",
        re.IGNORECASE | re.DOTALL,
    ),
)


def parse_seconds(value: str) -> float | None:
    """``"75.5"``, ``"01:15.5"`` or ``"00:01:15.5"`` as seconds; ``None`` if it is none of these."""
    if not re.fullmatch(_TIME, value.strip()):
        return None
    total = 0.0
    for part in value.strip().split(":"):
        total = total * 60 + float(part)
    return total


def parse_interval(text: Any, *, sort: bool = False) -> list[float] | None:
    """A ``[start, end]`` in seconds from ``{"time": [s, e]}``, ``[s, e]`` or text: the first "a - b" /
    "from a to b s" pair (seconds, ``mm:ss`` or ``hh:mm:ss``), else "starts at a … ends at b"; ``None``
    when there is none. The order is kept, so a reversed span stays reversed (a reward's format check
    rejects it); ``sort=True`` swaps it instead, as lmms-eval's Charades-STA parser does."""
    value = (
        text
        if isinstance(text, (dict, list, tuple))
        else parse_json_answer(text)
        if isinstance(text, str)
        else None
    )
    if isinstance(value, dict):
        value = value.get("time")
    if isinstance(value, (list, tuple)) and len(value) == 1 and isinstance(value[0], (list, tuple)):
        value = value[0]
    numbers = finite_numbers(value, 2)
    if numbers is None and isinstance(text, str) and value is None and len(text) <= _MAX_JSON_CHARS:
        numbers = _span_in_text(text)
    if numbers is None:
        return None
    return sorted(numbers) if sort else numbers


def _span_in_text(text: str) -> list[float] | None:
    for pattern in _SPAN_TEXTS:
        match = pattern.search(text)
        if match:
            a, b = parse_seconds(match.group(1)), parse_seconds(match.group(2))
            if a is not None and b is not None:
                return [a, b]
    return None


def finite_numbers(values: Any, n: int) -> list[float] | None:
    """``values`` as ``n`` finite floats (booleans refused); ``None`` when it is anything else."""
    if not isinstance(values, (list, tuple)) or len(values) != n:
        return None
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return None
        out.append(float(v))
    return out
