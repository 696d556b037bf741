"""Multiple choice: option lists and the option letter a text or response answers with."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from videorl.answers.text import answer_candidates, extract_boxed, extract_tag

CHOICE_LETTERS = "ABCDEFGHIJ"

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


# One rule for what is a letter, used by every reading below: an upper-case A–J standing alone, or a
# lower-case a–j in parentheses ("(b)"). A bare lower-case letter is a word ("the answer is a dog"), and an
# "I" followed by a lower-case word other than "is" is the pronoun ("I think B"), never option I. The
# checks sit after the letter so that a search can skip ahead to the next "(" or capital (fast on 1 MB).
_UPPER = r"([A-J])(?<![A-Za-z][A-J])(?![A-Za-z])(?!(?<=I)\s+(?!is\b)[a-z])"
_BARE = rf"(?:\(([a-j])\)|{_UPPER})"  # searched for anywhere
_LETTER = rf"(?:\(([a-j])\)|\(?\**{_UPPER})"  # after a phrase: "is (B)", "is **B**"
_LETTERS = re.compile(_BARE)
_LEAD = re.compile(r"^\s*(?:\(([a-j])\)|\(?([A-J])\s*[).:：、])")  # "(b) …", "B. …", "(B) …", "B: …"
_HEDGE = re.compile(_BARE + r"\)?\s*,?\s*(?:(?i:or)|/)\s*" + _LETTER)  # "A or B", "(a)/(b)"
_CHOICE_PATTERNS = [
    re.compile(r"(?i:answer|option|choice)\s*(?i:is|would\s+be|should\s+be|:|：)\s*:?\s*" + _LETTER),
    re.compile(r"\b(?i:choose|select|pick|go\s+with)\s+(?i:option\s+)?" + _LETTER),
    re.compile(r"\b(?i:option)\s+" + _LETTER + r"\)?\s+(?i:is\s+(?:the\s+)?correct)"),
    re.compile(_BARE + r"\)?\s+(?i:is\s+the\s+(?:correct|right|best)\s+(?:answer|option|choice))"),
    re.compile(r"答案(?:是|为|选)\s*[:：]?\s*" + _LETTER),
]


def _letters(match: re.Match[str]) -> list[str]:
    """The letters a match of a pattern built on ``_LETTER``/``_BARE`` read, upper-cased."""
    return [g.upper() for g in match.groups() if g]


def extract_choice(text: str | None, options: Options | None = None) -> str | None:
    """The option letter ``text`` answers with, or ``None`` when there is none or it is ambiguous.

    A letter is an upper-case ``A``–``J`` standing alone or a lower-case one in parentheses (``(b)``). In
    order: a letter in ``\\boxed{}``; the whole text is a letter (``B``, ``(B)``, ``B.``, ``b``); a
    leading ``B.``/``B)``/``(B)``/``B:``/``(b)``; phrases such as "the answer is (B)", "Answer: (c)",
    "I choose B", "答案是B"; the text equals an option's text, or contains exactly one option's text; a
    text of at most 20 characters with exactly one letter ("Option (d)"). With ``options``, only their
    letters are accepted. Hedges such as ``A or B`` give ``None``; "I" before a lower-case word is the
    pronoun, not a letter.
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
    if any(all(ok(x) for x in _letters(m)) for m in _HEDGE.finditer(text)):
        return None
    lead = _LEAD.match(text)
    if lead:
        return ok(_letters(lead)[0])
    for pattern in _CHOICE_PATTERNS:
        hits = {h for m in pattern.finditer(text) for h in _letters(m) if ok(h)}
        if hits:
            return hits.pop() if len(hits) == 1 else None
    if choices:
        found = _match_option_text(text, choices)
        if found:
            return found
    if len(text) <= 20:
        letters = {h for m in _LETTERS.finditer(text) for h in _letters(m) if ok(h)}
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
