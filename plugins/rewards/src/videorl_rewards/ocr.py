"""OCR: 1 − word error rate against the reference text, clipped to [0, 1]."""

from __future__ import annotations

from typing import Any

from videorl.api import ConfigError, RewardInput, TaskReward


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    """Levenshtein distance between two token sequences (insertions, deletions, substitutions)."""
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        current = [i]
        for j, h in enumerate(hyp, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1]


class OCRReward(TaskReward):
    """Accuracy = max(0, 1 − WER), WER = edit distance / reference length over case-folded words
    (``unit="char"``: characters without whitespace, for scripts written without spaces)."""

    name = "ocr"

    def __init__(self, *, unit: str = "word", **common: Any) -> None:
        super().__init__(**common)
        if unit not in ("word", "char"):
            raise ConfigError(f"ocr: unit must be 'word' or 'char', got {unit!r}")
        self.unit = unit

    def _tokens(self, text: str) -> list[str]:
        text = text.casefold()
        return list("".join(text.split())) if self.unit == "char" else text.split()

    def parse_answer(self, text: Any, inp: RewardInput) -> list[str] | None:
        return self._tokens(str(text)) or None

    def accuracy(self, answer: list[str], truth: list[str], inp: RewardInput) -> float:
        # the distance is at least the length difference: past one reference length, WER ≥ 1
        if len(answer) - len(truth) >= len(truth):
            return 0.0
        return max(0.0, 1.0 - edit_distance(truth, answer) / max(1, len(truth)))
