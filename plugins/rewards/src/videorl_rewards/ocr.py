"""OCR: 1 − word error rate against the reference text, clipped to [0, 1]."""

from __future__ import annotations

from typing import Any

from rapidfuzz.distance import Levenshtein

from videorl.api import ConfigError, DataError, RewardInput, TaskReward


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    """Levenshtein distance between two token sequences (insertions, deletions, substitutions), by
    rapidfuzz's bit-parallel algorithm: 20,000 words against 20,000 take about 50 ms."""
    return int(Levenshtein.distance(ref, hyp))


class OCRReward(TaskReward):
    """Accuracy = max(0, 1 − WER), WER = edit distance / reference length over case-folded words
    (``unit="char"``: characters without whitespace, for scripts written without spaces).

    Texts are bounded at ``max_tokens`` tokens (default 50,000, well under a second per check): a longer
    answer does not fit the type, a longer reference is a ``DataError``."""

    name = "ocr"

    def __init__(self, *, unit: str = "word", max_tokens: int = 50_000, **common: Any) -> None:
        super().__init__(**common)
        if unit not in ("word", "char"):
            raise ConfigError(f"ocr: unit must be 'word' or 'char', got {unit!r}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ConfigError(f"ocr: max_tokens must be a positive integer, got {max_tokens!r}")
        self.unit = unit
        self.max_tokens = max_tokens

    def _tokens(self, text: str) -> list[str]:
        text = text.casefold()
        return list("".join(text.split())) if self.unit == "char" else text.split()

    def parse_answer(self, text: Any, inp: RewardInput) -> list[str] | None:
        tokens = self._tokens(str(text))
        return tokens if tokens and len(tokens) <= self.max_tokens else None

    def parse_truth(self, inp: RewardInput) -> list[str]:
        tokens = self._tokens(str(inp.ground_truth)) if isinstance(inp.ground_truth, str) else []
        if len(tokens) > self.max_tokens:
            raise DataError(
                f"sample {inp.sample_id!r}: the reference text has {len(tokens)} {self.unit}s, over the OCR "
                f"reward's max_tokens ({self.max_tokens}); split the sample or raise "
                "rewards.options.ocr.max_tokens"
            )
        parsed: list[str] = super().parse_truth(inp)
        return parsed

    def accuracy(self, answer: list[str], truth: list[str], inp: RewardInput) -> float:
        # the distance is at least the length difference: past one reference length, WER ≥ 1
        if len(answer) - len(truth) >= len(truth):
            return 0.0
        return max(0.0, 1.0 - edit_distance(truth, answer) / max(1, len(truth)))
