"""Counting reward: the last <answer> must hold the ground-truth count.

Written as a third-party reward should be: :class:`videorl.api.TaskReward` does the extraction (the
last ``<answer>``), the format rule and the weighting; :mod:`videorl.api.answers` reads the number.
"""

from __future__ import annotations

from typing import Any

from videorl.api import RewardInput, TaskReward, answers


def parse_count(text: Any) -> int | None:
    """The one count ``text`` states (digits or English number words), or ``None`` when it states none,
    several, a fraction or a negative number."""
    value = answers.parse_number(text)
    if value is None or value < 0 or not value.is_integer():
        return None
    return int(value)


class CountingReward(TaskReward):
    """Accuracy 1 when the last ``<answer>`` holds exactly the ground-truth count, else 0.

    It declares its defaults with its keyword defaults: accuracy alone, only a tagged answer read (no
    format share, no untagged fallback), built on its own and routed in a run alike, unless the run's
    config sets ``rewards.accuracy_weight``, ``format_weight`` or ``fallback`` (for every reward) or
    ``rewards.options.counting`` (for this one).
    """

    name = "counting"
    truth_shape = "a whole count such as 3 (digits or a number word)"
    truth_types = (str, int, float)  # a number or its text; parse_count refuses 2.5

    def __init__(
        self,
        *,
        accuracy_weight: float = 1.0,
        format_weight: float = 0.0,
        fallback: bool = False,
        **common: Any,
    ) -> None:
        super().__init__(
            accuracy_weight=accuracy_weight, format_weight=format_weight, fallback=fallback, **common
        )

    def parse_answer(self, text: Any, inp: RewardInput) -> int | None:
        return parse_count(text)

    def accuracy(self, answer: int, truth: int, inp: RewardInput) -> dict[str, float]:
        # abs_error is a part of its own: the trainer logs it per problem type (parts/counting/abs_error)
        return {"accuracy": 1.0 if answer == truth else 0.0, "abs_error": float(abs(answer - truth))}
