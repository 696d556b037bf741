"""Answer parsing shared by rewards and benchmark adapters: tags, ``\\boxed{}``, choice letters, numbers,
yes/no, time spans, JSON, IoU and relative accuracy.

Every function is pure, never raises on model output (malformed text gives ``None`` or ``0.0``) and is
linear in the length of its input, so a 1 MB response costs milliseconds.

Which ``<answer>`` counts: the **last** complete ``<answer>…</answer>`` pair. With nested or repeated
tags (``<answer>A</answer><answer>B</answer>``, ``<answer><answer>B</answer>``) that is the innermost
opening tag before the last closing tag (``B`` in both examples). Spacing and case inside tag brackets are
repaired first (``< /Answer >`` reads as ``</answer>``); the text between tags is left untouched.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from videorl.media.info import MediaInfo

__all__ = [
    "BOX_CONVENTIONS",
    "CHOICE_LETTERS",
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

CHOICE_LETTERS = "ABCDEFGHIJ"

# --- tags ----------------------------------------------------------------------------------------

_TAG = re.compile(r"<\s*(/?)\s*(think|answer)\s*>", re.IGNORECASE)


def normalize_tags(text: str) -> str:
    """Repair the spelling of ``<think>``/``<answer>`` tags (``< /ANSWER >`` → ``</answer>``)."""
    return _TAG.sub(lambda m: f"<{m.group(1)}{m.group(2).lower()}>", text)


def extract_tag(text: str, tag: str = "answer") -> str | None:
    """The stripped content of the last complete ``<tag>…</tag>``; ``None`` when there is none.

    ``text`` should have gone through :func:`normalize_tags` (done here when the exact tags are absent).
    """
    close = f"</{tag}>"
    if close not in text:
        text = normalize_tags(text)
    end = text.rfind(close)
    if end < 0:
        return None
    opening = f"<{tag}>"
    start = text.rfind(opening, 0, end)
    if start < 0:
        return None
    return text[start + len(opening) : end].strip()


def strip_think(text: str) -> str:
    """``text`` without its reasoning: what follows the last ``</think>``, else ``text`` minus an unclosed
    ``<think>…``."""
    text = normalize_tags(text)
    end = text.rfind("</think>")
    if end >= 0:
        return text[end + len("</think>") :].strip()
    start = text.find("<think>")
    return (text[:start] if start >= 0 else text).strip()


# --- boxed and final statements ------------------------------------------------------------------

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")


def _matching_braces(text: str) -> dict[int, int]:
    """Index of each ``{`` → index of its ``}``, in one pass (unbalanced ones are absent)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            pairs[stack.pop()] = i
    return pairs


def extract_boxed(text: str) -> str | None:
    """The content of the last brace-balanced ``\\boxed{…}`` (or ``\\fbox{…}``, or ``\\boxed X``)."""
    matches = list(_BOXED.finditer(text))
    if not matches:
        return None
    pairs: dict[int, int] | None = None
    for match in reversed(matches):
        i = match.end()
        if i < len(text) and text[i] == "{":
            if pairs is None:
                pairs = _matching_braces(text)
            if i in pairs:
                return text[i + 1 : pairs[i]].strip()
            continue  # unbalanced: try an earlier one
        word = re.match(r"[^\s$]+", text[i:])
        if word:
            return word.group(0)
    return None


_FINAL = re.compile(
    r"(?:final\s+answer|the\s+(?:correct\s+|best\s+|right\s+)?(?:answer|option|choice))"
    r"(?:\s+(?:is|would\s+be|should\s+be|will\s+be)\s*[:：]?|\s*[:：])\s*(\S.*)$",
    re.IGNORECASE | re.MULTILINE,
)


def final_statement(text: str) -> str | None:
    """The answer in the last "…the (final) answer is X" / "Final answer: X" line, with a ``\\boxed{}`` inside
    preferred."""
    last = None
    for last in _FINAL.finditer(text):  # noqa: B007 - only the last match is wanted
        pass
    if last is None:
        return None
    found = last.group(1).strip()
    boxed = extract_boxed(found)
    if boxed is not None:
        return boxed
    found = found.rstrip(".。;；").strip()
    return strip_math_delimiters(found) or None


def strip_math_delimiters(text: str) -> str:
    """``text`` without one pair of wrapping ``$…$``, ``$$…$$``, ``\\(…\\)`` or ``\\[…\\]``."""
    text = text.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
            return text[len(left) : len(text) - len(right)].strip()
    return text


def answer_candidates(response: str) -> list[str]:
    """Where an answer may sit in a response without ``<answer>`` tags, best first.

    The final statement ("the final answer is X"), the last ``\\boxed{}``, the text after the reasoning,
    and the whole text. Used only when a response has no ``<answer>`` tag and the fallback is enabled.
    """
    out: list[str] = []
    visible = strip_think(response)
    for candidate in (final_statement(visible), extract_boxed(visible), visible):
        if candidate and candidate not in out:
            out.append(candidate)
    return out


def answer_text(response: str) -> str:
    """The answer part of a whole response: the last ``<answer>`` content (even empty), else the first of
    :func:`answer_candidates`, else ``""``."""
    tagged = extract_tag(response)
    if tagged is not None:
        return tagged
    candidates = answer_candidates(response)
    return candidates[0] if candidates else ""


# --- multiple choice ---------------------------------------------------------------------------

_OPTION_PREFIX = re.compile(r"^\s*\(?([A-J])\s*[).:：、]\s*(.*)$", re.DOTALL)


#: options as a list (``"A. Red"``, ``"(A) Red"``, ``"A: Red"`` or bare ``"Red"``) or a letter → text mapping
Options = Sequence[str] | Mapping[str, str]


def strip_option_letter(option: Any) -> str:
    """``"A. red"`` / ``"(A) red"`` / ``"A: red"`` → ``"red"``; a bare option comes back stripped."""
    match = _OPTION_PREFIX.match(str(option))
    return (match.group(2) if match else str(option)).strip()


def option_map(options: Options | None) -> dict[str, str]:
    """Letter → option text, from ``"A. Red"``, ``"(A) Red"``, ``"A: Red"`` or bare ``"Red"`` (lettered by
    position). A mapping is taken as letter → text already (so bare texts that look lettered stay whole)."""
    if isinstance(options, Mapping):
        return {str(k).upper(): str(v).strip() for k, v in options.items()}
    out: dict[str, str] = {}
    for i, option in enumerate(options or []):
        if i >= len(CHOICE_LETTERS):
            break
        match = _OPTION_PREFIX.match(str(option))
        if match:
            out[match.group(1)] = match.group(2).strip()
        else:
            out[CHOICE_LETTERS[i]] = str(option).strip()
    return out


def _norm_text(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.casefold()).split())


_CHOICE_PATTERNS = [  # the letter itself is matched case-sensitively: "the answer is a dog" is no letter
    re.compile(r"(?i:answer|option|choice)\s*(?i:is|would\s+be|should\s+be|:|：)\s*:?\s*\(?\**([A-J])\b"),
    re.compile(r"\b(?i:choose|select|pick|go\s+with)\s+(?i:option\s+)?\(?([A-J])\b"),
    re.compile(r"\b(?i:option)\s+\(?([A-J])\)?\s+(?i:is\s+(?:the\s+)?correct)"),
    re.compile(r"\b([A-J])\)?\s+(?i:is\s+the\s+(?:correct|right|best)\s+(?:answer|option|choice))"),
    re.compile(r"答案(?:是|为|选)\s*[:：]?\s*\(?([A-J])"),
]


def extract_choice(text: str | None, options: Options | None = None) -> str | None:
    """The option letter ``text`` answers with, or ``None`` when there is none or it is ambiguous.

    In order: a letter in ``\\boxed{}``; the whole text is a letter (``B``, ``(B)``, ``B.``, ``b``); a
    leading ``B.``/``B)``/``(B)``/``B:``; phrases such as "the answer is (B)", "I choose B", "答案是B";
    the text equals an option's text, or contains exactly one option's text; a text of at most 20
    characters with exactly one standalone letter. With ``options``, only their letters are accepted.
    Hedges such as ``A or B`` give ``None``.
    """
    if not text:
        return None
    text = text.strip()
    choices = option_map(options)
    allowed = "".join(choices) if choices else CHOICE_LETTERS

    def ok(letter: str) -> str | None:
        letter = letter.upper()
        return letter if letter in allowed else None

    boxed = extract_boxed(text)
    if boxed is not None and boxed != text:
        return extract_choice(boxed, options)
    whole = re.fullmatch(r"\(?\**([A-Ja-j])\**\)?[.:)]?", text)
    if whole:
        return ok(whole.group(1))
    lead = _OPTION_PREFIX.match(text)
    if lead:
        return ok(lead.group(1))
    for pattern in _CHOICE_PATTERNS:
        hits = {h for h in (m.group(1) for m in pattern.finditer(text)) if ok(h)}
        if hits:
            return hits.pop() if len(hits) == 1 else None
    if choices:
        found = _match_option_text(text, choices)
        if found:
            return found
    if len(text) <= 20:
        letters = {m.group(1) for m in re.finditer(r"(?<![A-Za-z])([A-J])(?![A-Za-z])", text)}
        letters = {x for x in letters if ok(x)}
        if len(letters) == 1:
            return letters.pop()
    return None


def answer_choice(response: str, options: Options | None = None) -> str | None:
    """The option letter a whole response answers with (``None`` when absent or ambiguous): the first
    letter :func:`extract_choice` reads from the last ``<answer>`` content, then from each of
    :func:`answer_candidates`. Unlike a reward's extraction, a tag without a letter does not end the search.
    """
    if not response:
        return None
    tagged = extract_tag(response)
    for candidate in ([tagged] if tagged else []) + answer_candidates(response):
        letter = extract_choice(candidate, options)
        if letter is not None:
            return letter
    return None


def _match_option_text(text: str, choices: dict[str, str]) -> str | None:
    norm = _norm_text(text)
    if not norm:
        return None
    bodies = {letter: _norm_text(body) for letter, body in choices.items() if _norm_text(body)}
    exact = [letter for letter, body in bodies.items() if body == norm]
    if len(exact) == 1:
        return exact[0]
    padded = f" {norm} "
    contained = [letter for letter, body in bodies.items() if f" {body} " in padded]
    # an option whose text is inside another matched option's text ("red" in "dark red") does not count
    contained = [
        a for a in contained if not any(a != b and f" {bodies[a]} " in f" {bodies[b]} " for b in contained)
    ]
    return contained[0] if len(contained) == 1 else None


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

_YES_WORDS, _NO_WORDS = ("yes", "true", "y", "1"), ("no", "false", "n", "0")
_BOOLEAN_WORDS = dict.fromkeys(_YES_WORDS, "yes") | dict.fromkeys(_NO_WORDS, "no")
_SPOKEN_BOOLEAN = re.compile(r"\b(yes|no|true|false)\b", re.IGNORECASE)
_WORD_YES, _WORD_NO = re.compile(r"\byes\b", re.IGNORECASE), re.compile(r"\bno\b", re.IGNORECASE)
_SPOKEN_YES, _SPOKEN_NO = (
    re.compile(r"\b(?:yes|true)\b", re.IGNORECASE),
    re.compile(r"\b(?:no|false)\b", re.IGNORECASE),
)


def parse_boolean(text: Any, *, leading_wins: bool = False) -> str | None:
    """``"yes"`` or ``"no"``, or ``None`` when ``text`` states neither or both.

    In order: the whole text is one of yes/no/true/false/y/n/1/0 (punctuation ignored); the word it
    starts with ("No, it is not true." → no), unless both "yes" and "no" occur; the one polarity its
    yes/no/true/false words share. ``leading_wins=True`` lets the first word decide even when both
    occur ("yes and no" → yes), TempCompass's official rule; by default that is a hedge (rewards).
    """
    if isinstance(text, bool):
        return "yes" if text else "no"
    text = str(text)
    if len(text.strip()) <= 16:  # a longer text is no single word
        whole = re.sub(r"[^\w]", "", text).casefold()
        if whole in _BOOLEAN_WORDS:
            return _BOOLEAN_WORDS[whole]
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
    numbers = _finite_numbers(value, 2)
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


# --- intervals, boxes, relative accuracy -------------------------------------------------------


def _finite_numbers(values: Any, n: int) -> list[float] | None:
    if not isinstance(values, (list, tuple)) or len(values) != n:
        return None
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return None
        out.append(float(v))
    return out


def interval_iou(pred: Any, truth: Any) -> float:
    """1-D IoU of two ``[start, end]`` intervals; 0 when either is malformed, reversed, NaN or empty."""
    a, b = _finite_numbers(pred, 2), _finite_numbers(truth, 2)
    if a is None or b is None or a[0] > a[1] or b[0] > b[1]:
        return 0.0
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = max(a[1], b[1]) - min(a[0], b[0])
    return inter / union if union > 1e-12 else 0.0


def box_iou(pred: Any, truth: Any) -> float:
    """IoU of two ``[x1, y1, x2, y2]`` boxes; 0 when either is malformed, reversed, NaN or empty."""
    a, b = _finite_numbers(pred, 4), _finite_numbers(truth, 4)
    if a is None or b is None or a[0] > a[2] or a[1] > a[3] or b[0] > b[2] or b[1] > b[3]:
        return 0.0
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 1e-12 else 0.0


#: box coordinate conventions: 0–1 fractions, a 0–1000 grid, pixels of the resized model input,
#: pixels of the source video
BOX_CONVENTIONS = ("unit", "grid1000", "pixels", "source_pixels")


def convert_box(box: Any, source: str, target: str, media: MediaInfo | None = None) -> list[float] | None:
    """``box`` converted from convention ``source`` to ``target`` (see :data:`BOX_CONVENTIONS`).

    Pixel conventions need the frame size from ``media`` (``resized_width/height`` for ``"pixels"``,
    ``width/height`` for ``"source_pixels"``); a missing size raises ``ValueError`` naming it. A
    malformed box gives ``None``.
    """
    values = _finite_numbers(box, 4)
    if values is None:
        return None
    if source == target:
        return values
    sx, sy = _scale(source, media)
    tx, ty = _scale(target, media)
    return [values[0] * tx / sx, values[1] * ty / sy, values[2] * tx / sx, values[3] * ty / sy]


def _scale(convention: str, media: MediaInfo | None) -> tuple[float, float]:
    """Units of ``convention`` per unit fraction of the frame."""
    if convention == "unit":
        return 1.0, 1.0
    if convention == "grid1000":
        return 1000.0, 1000.0
    if convention == "pixels":
        w = media.resized_width if media else None
        h = media.resized_height if media else None
        what = "resized_width/resized_height"
    elif convention == "source_pixels":
        w = media.width if media else None
        h = media.height if media else None
        what = "width/height"
    else:
        raise ValueError(f"unknown box convention {convention!r}; known: {', '.join(BOX_CONVENTIONS)}")
    if not w or not h:
        raise ValueError(
            f"box convention {convention!r} needs the media's {what}, which the sample does not carry; "
            "give the sample its media metadata or state the boxes in 'unit' or 'grid1000'"
        )
    return float(w), float(h)


#: the MRA thresholds θ = 0.50, 0.55, …, 0.95, as hundredths (exact)
MRA_THRESHOLDS = tuple(range(50, 100, 5))


def mean_relative_accuracy(pred: float, truth: float, *, inclusive: bool = False) -> float:
    """MRA: the fraction of θ ∈ {0.50, 0.55, …, 0.95} with ``|pred − truth| / |truth| < 1 − θ``.

    Strict ``<`` by default (EasyVideoR1); ``inclusive=True`` uses ``≤`` (VSI-Bench's official code,
    lmms-eval). The comparison is made in hundredths, so a relative error of exactly 0.05 meets θ =
    0.95 only when inclusive. ``truth == 0`` counts only an exact ``0`` prediction. Non-finite inputs
    give 0.
    """
    if not (math.isfinite(pred) and math.isfinite(truth)):
        return 0.0
    if truth == 0:
        return 1.0 if pred == 0 else 0.0
    rel = round(abs(pred - truth) / abs(truth) * 100, 9)
    hits = sum((rel <= 100 - t) if inclusive else (rel < 100 - t) for t in MRA_THRESHOLDS)
    return hits / len(MRA_THRESHOLDS)
