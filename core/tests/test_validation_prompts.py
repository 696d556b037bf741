"""Validation prompts are encoded when a validation pass reads them: none at start-up, each once per
pass, and none held encoded between passes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from videorl.data import Sample
from videorl.encoding import EncodedOnRead, Prompt
from videorl.generation import Completion
from videorl.train.step import evaluate


class _Engine:
    def __init__(self) -> None:
        self.seen: list[list[Any]] = []

    def generate(self, encoded: Sequence[Any], params: Any) -> list[list[Completion]]:
        self.seen.append(list(encoded))
        return [[Completion([1], [-0.5], "stop")] for _ in encoded]


def test_validation_prompts_are_encoded_on_read_once_per_pass() -> None:
    encoded: list[str] = []

    def encode(sample: Sample) -> Prompt:
        encoded.append(sample.id)
        return Prompt(sample, f"tokens of {sample.id}", None)  # type: ignore[arg-type]

    samples = [Sample(f"v{i}", "text", f"question {i}", "open_ended", "a") for i in range(3)]
    prompts = EncodedOnRead(samples, encode)
    assert len(prompts) == 3 and encoded == []  # start-up: nothing encoded
    assert prompts[1].encoded == "tokens of v1" and [p.sample.id for p in prompts[1:]] == ["v1", "v2"]
    encoded.clear()

    def score(episodes: Sequence[Any]) -> None:
        for e in episodes:
            e.reward = 1.0 if e.prompt.sample.id != "v2" else 0.0

    engine = _Engine()
    for _ in range(2):  # two validation passes: each encodes every prompt once
        metrics = evaluate(prompts, engine, score, max_tokens=8)  # type: ignore[arg-type]
        assert metrics["val/reward/overall"] == 2 / 3
    assert encoded == ["v0", "v1", "v2"] * 2
    assert engine.seen == [["tokens of v0", "tokens of v1", "tokens of v2"]] * 2
