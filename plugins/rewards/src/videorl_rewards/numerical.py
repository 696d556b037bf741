"""Numerical answers: one number, equal to the ground truth within a relative or absolute tolerance."""

from __future__ import annotations

from typing import Any

from videorl.api import ConfigError, RewardInput, TaskReward, answers


class NumericalReward(TaskReward):
    """Accuracy 1 when ``|answer − truth| ≤ max(abs_tol, rel_tol·|truth|)``, else 0.

    Numbers are read with :func:`videorl.answers.parse_number`: decimals, thousands separators,
    fractions, percentages (÷100) and English number words; an answer stating several different
    numbers does not fit the type.
    """

    name = "numerical"

    def __init__(self, *, rel_tol: float = 1e-3, abs_tol: float = 1e-6, **common: Any) -> None:
        super().__init__(**common)
        for label, value in (("rel_tol", rel_tol), ("abs_tol", abs_tol)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ConfigError(f"numerical: {label} must be a non-negative number, got {value!r}")
        self.rel_tol = float(rel_tol)
        self.abs_tol = float(abs_tol)

    def parse_answer(self, text: Any, inp: RewardInput) -> float | None:
        return answers.parse_number(text)

    def accuracy(self, answer: float, truth: float, inp: RewardInput) -> float:
        return 1.0 if abs(answer - truth) <= max(self.abs_tol, self.rel_tol * abs(truth)) else 0.0
