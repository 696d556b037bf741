"""Golden cases of the OCR reward: 1 − WER, clipped (0.9·accuracy + 0.1·format)."""

from __future__ import annotations

from videorl.api import RewardInput
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
