"""The reward: 1 when the text in the last <answer>...</answer> equals the ground truth."""

from __future__ import annotations

from typing import Any

from videorl.api import RewardInput, TaskReward


class ExactAnswerReward(TaskReward):
    """Exact match of the last ``<answer>`` against ``ground_truth``, case and spaces ignored.

    :class:`videorl.api.TaskReward` finds the last ``<answer>``, applies the format rule and weighs
    accuracy and format. Its keyword defaults below are its declared defaults: it scores accuracy alone
    and reads only a tagged answer, built on its own and routed in a run alike, unless the run's config
    sets ``rewards.accuracy_weight``, ``format_weight`` or ``fallback`` (for every reward) or
    ``rewards.options.<name>`` (for this one).
    """

    name = "{{ cookiecutter.underscored }}"
    #: what a ground truth looks like (a dataset row with another shape is refused when it loads)
    truth_shape = "a short text answer such as \"red\""
    truth_types = (str,)

    def __init__(
        self, *, accuracy_weight: float = 1.0, format_weight: float = 0.0, fallback: bool = False, **common: Any
    ) -> None:
        super().__init__(accuracy_weight=accuracy_weight, format_weight=format_weight, fallback=fallback, **common)

    def parse_answer(self, text: Any, inp: RewardInput) -> str | None:
        return " ".join(str(text).casefold().split()) or None

    def accuracy(self, answer: str, truth: str, inp: RewardInput) -> float:
        return 1.0 if answer == truth else 0.0
