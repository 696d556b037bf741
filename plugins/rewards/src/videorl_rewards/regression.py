"""Regression: mean relative accuracy (MRA) of a number over the thresholds 0.50, 0.55, …, 0.95."""

from __future__ import annotations

from typing import Any

from videorl.api import RewardInput, TaskReward, answers


class RegressionReward(TaskReward):
    """Accuracy = MRA: the fraction of θ ∈ {0.50, …, 0.95} with ``|p − g| / |g| < 1 − θ`` (strict, as
    EasyVideoR1 and VSI-Bench training; ``inclusive=True`` for ``≤``)."""

    name = "regression"

    def __init__(self, *, inclusive: bool = False, **common: Any) -> None:
        super().__init__(**common)
        self.inclusive = bool(inclusive)

    def parse_answer(self, text: Any, inp: RewardInput) -> float | None:
        return answers.parse_number(text)

    def accuracy(self, answer: float, truth: float, inp: RewardInput) -> float:
        return answers.mean_relative_accuracy(answer, truth, inclusive=self.inclusive)
