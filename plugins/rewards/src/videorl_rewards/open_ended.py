"""Open-ended answers: the mean ROUGE F1 (via ``rouge-score``) against the reference answer."""

from __future__ import annotations

import functools
import re
from typing import Any

from nltk.stem.porter import PorterStemmer  # a dependency of rouge-score
from rouge_score import rouge_scorer, tokenizers

from videorl.api import ConfigError, RewardInput, TaskReward

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")


class _Tokenizer(tokenizers.Tokenizer):
    """rouge-score's tokenizer (case-folded words, Porter stems of ASCII words over 3 letters), but
    keeping non-ASCII words and splitting CJK text into characters instead of dropping them. Stems are
    cached: stemming is most of ROUGE's cost."""

    def __init__(self) -> None:
        self._stem = functools.lru_cache(maxsize=65536)(PorterStemmer().stem)

    def tokenize(self, text: str) -> list[str]:
        return [self._stem(t) if len(t) > 3 and t.isascii() else t for t in _TOKEN.findall(text.casefold())]


def _normalized(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.casefold()).split())


class OpenEndedReward(TaskReward):
    """Accuracy = the mean of ROUGE-1, ROUGE-2 and ROUGE-L F1 (ROUGE-2 left out when the reference has
    fewer than two tokens, as it has no bigram); 1 for a case- and punctuation-insensitive exact match.

    Answers longer than ``max_chars`` (10,000) are cut there first: ROUGE's cost grows with the product
    of the lengths, and such an answer's precision is near 0 anyway.
    """

    name = "open_ended"

    def __init__(self, *, max_chars: int = 10_000, **common: Any) -> None:
        super().__init__(**common)
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
            raise ConfigError(f"open_ended: max_chars must be a positive integer, got {max_chars!r}")
        self.max_chars = max_chars
        self._tokenizer = _Tokenizer()
        self._scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], tokenizer=self._tokenizer)

    def parse_answer(self, text: Any, inp: RewardInput) -> str | None:
        text = str(text).strip()[: self.max_chars]
        return text if self._tokenizer.tokenize(text) else None

    def accuracy(self, answer: str, truth: str, inp: RewardInput) -> float:
        if _normalized(answer) == _normalized(truth):
            return 1.0
        scores = self._scorer.score(truth, answer)
        kinds = (
            ["rouge1", "rougeL"]
            if len(self._tokenizer.tokenize(truth)) < 2
            else ["rouge1", "rouge2", "rougeL"]
        )
        return sum(scores[k].fmeasure for k in kinds) / len(kinds)
