"""Multiple choice: the option letter, read from the answer (letters, ``\\boxed{}``, "the answer is (X)",
or an option's text matched against the sample's ``options``), must equal the ground truth's."""

from __future__ import annotations

from typing import Any

from videorl.api import RewardInput, TaskReward, answers


class MultipleChoiceReward(TaskReward):
    """Accuracy 1 when the answered letter equals the ground truth's letter, else 0.

    The ground truth may be a letter (``"B"``, ``"(B)"``, ``"B. red"``) or an option's text. An answer
    that names no letter, or several (``"A or B"``), does not fit the type (format 0.5, accuracy 0).
    """

    name = "multiple_choice"
    truth_shape = 'an option letter such as "B" (or "(B)", "B. red", an option\'s text)'
    truth_types = (str,)

    def parse_answer(self, text: Any, inp: RewardInput) -> str | None:
        return answers.extract_choice(str(text), inp.options)

    def accuracy(self, answer: str, truth: str, inp: RewardInput) -> float:
        return 1.0 if answer == truth else 0.0
