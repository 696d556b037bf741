"""Golden cases of the OCR reward: 1 − WER, clipped (0.9·accuracy + 0.1·format)."""

from __future__ import annotations

import time

import pytest

from videorl.api import ConfigError, DataError, RewardInput
from videorl.testing import assert_reward_contract
from videorl_rewards.ocr import OCRReward, edit_distance


def case(response: str, expected: float, truth: str = "hello world foo bar") -> tuple[RewardInput, float]:
    return RewardInput(response, "OCR", truth, sample_id="ocr"), expected


CASES = [
    case("<answer>hello world foo bar</answer>", 1.0),
    case("<answer>Hello World FOO bar</answer>", 1.0),
    case("<answer>hello world foo</answer>", 0.9 * 0.75 + 0.1),  # one deletion of four words
    case("<answer>hello there foo bar</answer>", 0.9 * 0.75 + 0.1),  # one substitution
    case("", 0.0),
    case("<answer>completely different text here</answer>", 0.1),  # WER 1
    case("<answer>hello world foo bar baz qux</answer>", 0.9 * 0.5 + 0.1),  # two insertions
    case("x " * 500_000, 0.0),  # 1 MB, untagged: WER far above 1
    case("hello world foo bar", 0.9),
    case("<answer>   </answer>", 0.05),
    case("<answer>bar foo world hello</answer>", 0.1),  # order matters: 4 substitutions
]


def test_golden_cases() -> None:
    assert_reward_contract(OCRReward(), CASES)


def test_character_unit() -> None:
    assert_reward_contract(
        OCRReward(unit="char"), [case("<answer>你好世</answer>", 0.9 * 0.75 + 0.1, truth="你好世界")]
    )


def test_edit_distance() -> None:
    assert edit_distance(list("kitten"), list("sitting")) == 3
    assert edit_distance([], ["a"]) == 1


def test_long_texts_are_fast_and_bounded() -> None:
    """20,000-word texts (pure Python's quadratic distance took minutes) score in well under a second;
    texts over max_tokens are bounded: the answer does not fit, the reference is a data error."""
    words = [f"w{i % 997}" for i in range(20_000)]
    truth = " ".join(words)
    answer = " ".join(words[:5_000] + ["x"] * 1_000 + words[6_000:])  # 1,000 substitutions
    start = time.perf_counter()
    out = OCRReward()(RewardInput(f"<answer>{answer}</answer>", "OCR", truth, sample_id="long"))
    assert time.perf_counter() - start < 2.0
    assert out is not None and out.score == pytest.approx(0.9 * (1 - 1_000 / 20_000) + 0.1)
    small = OCRReward(max_tokens=100)
    over = RewardInput("<answer>" + "a " * 101 + "</answer>", "OCR", "a b", sample_id="o")
    out = small(over)
    assert out is not None and out.score == pytest.approx(0.05)  # tagged but does not parse: format 0.5
    with pytest.raises(DataError, match=r"'huge'.*101 words.*max_tokens \(100\)"):
        small(RewardInput("<answer>a</answer>", "OCR", "a " * 101, sample_id="huge"))
    with pytest.raises(ConfigError, match="max_tokens must be a positive integer"):
        OCRReward(max_tokens=0)
