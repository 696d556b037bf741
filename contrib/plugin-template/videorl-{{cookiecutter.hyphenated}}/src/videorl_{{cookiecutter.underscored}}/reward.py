"""The reward: 1 when the text in the last <answer>...</answer> equals the ground truth."""

from __future__ import annotations

import re

from videorl.api import RewardInput, RewardOutput

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def _normalise(text: str) -> str:
    return " ".join(text.strip().casefold().split())


class ExactAnswerReward:
    """Exact match of the last ``<answer>`` against ``ground_truth``, case and spaces ignored."""

    def __call__(self, inp: RewardInput) -> RewardOutput:
        answers = _ANSWER.findall(inp.response)
        correct = bool(answers) and _normalise(answers[-1]) == _normalise(str(inp.ground_truth))
        accuracy = 1.0 if correct else 0.0
        return RewardOutput(score=accuracy, parts={"accuracy": accuracy})
