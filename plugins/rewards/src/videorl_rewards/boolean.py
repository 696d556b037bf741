"""Boolean answers: yes/no/true/false (and 1/0) normalised, compared with the ground truth."""

from __future__ import annotations

from typing import Any

from videorl.api import RewardInput, TaskReward, answers

#: the parser this reward uses: core's, where a hedge ("yes or no") is no answer
parse_boolean = answers.parse_boolean


class BooleanReward(TaskReward):
    """Accuracy 1 when the answer's polarity equals the ground truth's, else 0."""

    name = "boolean"

    def parse_answer(self, text: Any, inp: RewardInput) -> str | None:
        return parse_boolean(text)

    def accuracy(self, answer: str, truth: str, inp: RewardInput) -> float:
        return 1.0 if answer == truth else 0.0
