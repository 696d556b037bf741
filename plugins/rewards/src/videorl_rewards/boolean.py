"""Boolean answers: yes/no/true/false (and 1/0) normalised, compared with the ground truth."""

from __future__ import annotations

import re
from typing import Any

from videorl.api import RewardInput, TaskReward

_WORDS = {
    "yes": "yes",
    "true": "yes",
    "y": "yes",
    "1": "yes",
    "no": "no",
    "false": "no",
    "n": "no",
    "0": "no",
}
_SPOKEN = re.compile(r"\b(yes|no|true|false)\b", re.IGNORECASE)
_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def parse_boolean(text: Any) -> str | None:
    """``"yes"`` or ``"no"``: the whole text is one of yes/no/true/false/y/n/1/0, else the word it starts
    with ("No, it is not true." → no) unless both "yes" and "no" occur, else the one polarity its
    yes/no/true/false words share; both polarities ("yes or no") or none give ``None``."""
    if isinstance(text, bool):
        return "yes" if text else "no"
    stripped = re.sub(r"[^\w]", "", str(text)).casefold()
    if stripped in _WORDS:
        return _WORDS[stripped]
    first = _SPOKEN.match(str(text).lstrip())
    if first and len({w.casefold() for w in _YES_NO.findall(str(text))}) <= 1:
        return _WORDS[first.group(1).casefold()]
    found = {_WORDS[m.group(1).casefold()] for m in _SPOKEN.finditer(str(text))}
    return found.pop() if len(found) == 1 else None


class BooleanReward(TaskReward):
    """Accuracy 1 when the answer's polarity equals the ground truth's, else 0."""

    name = "boolean"

    def parse_answer(self, text: Any, inp: RewardInput) -> str | None:
        return parse_boolean(text)

    def accuracy(self, answer: str, truth: str, inp: RewardInput) -> float:
        return 1.0 if answer == truth else 0.0
