"""Counting reward: the last <answer> must hold the ground-truth count."""

from __future__ import annotations

import re

from videorl.api import RewardInput, RewardOutput

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]
_TOKEN = re.compile(r"-?\d+(?:\.\d+)?|[a-z]+")


def parse_count(text: str) -> int | None:
    """The single count in ``text`` (digits or a number word), or None when there is none or several."""
    found: list[int] = []
    for token in _TOKEN.findall(text.casefold()):
        if token in _WORDS:
            found.append(_WORDS.index(token))
        elif token[0].isdigit() or token[0] == "-":
            value = float(token)
            if value.is_integer():
                found.append(int(value))
            else:
                return None
    return found[0] if len(found) == 1 else None


class CountingReward:
    """1.0 when the last ``<answer>`` holds exactly the ground-truth count, else 0.0."""

    def __call__(self, inp: RewardInput) -> RewardOutput:
        answers = _ANSWER.findall(inp.response)
        predicted = parse_count(answers[-1]) if answers else None
        expected = parse_count(str(inp.ground_truth))
        accuracy = 1.0 if predicted is not None and predicted == expected else 0.0
        return RewardOutput(score=accuracy, parts={"accuracy": accuracy})
