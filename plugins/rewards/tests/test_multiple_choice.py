"""Golden cases of the multiple-choice reward (0.9·accuracy + 0.1·format)."""

from __future__ import annotations

from typing import Any

from videorl.api import RewardInput
from videorl.testing import assert_reward_contract
from videorl_rewards.multiple_choice import MultipleChoiceReward

OPTIONS = ["A. red", "B. blue", "C. dark red", "D. green"]


def case(response: str, expected: float, truth: Any = "<answer>B</answer>") -> tuple[RewardInput, float]:
    return RewardInput(response, "multiple choice", truth, options=OPTIONS, sample_id="mc"), expected


CASES = [
    case("<answer>B</answer>", 1.0),
    case("<answer>A</answer>", 0.1),
    case("<think>the car is blue</think><answer>(B)</answer>", 1.0),
    case("<answer>blue</answer>", 1.0),  # the option's text
    case("<answer>A or B</answer>", 0.05),  # a hedge does not fit the type
    case("", 0.0),
    case("<answer>A</answer> no, <answer>B</answer>", 1.0),  # the last answer counts
    case("<answer>B</answer> no, <answer>A</answer>", 0.1),
    case("The answer is B", 0.9),  # no tag: accuracy from the text, format 0
    case("<answer>\\boxed{B}</answer>", 1.0),
    case("<answer>B</answer>", 1.0, truth="blue"),  # ground truth given as option text
    case("<answer>E</answer>", 0.05),  # not an option
    case("B" * 1_000_000, 0.0),  # 1 MB: no tag, no single letter
    case("<answer>A. red</answer>", 1.0, truth="A"),
    case("<answer>It is dark red.</answer>", 1.0, truth="C"),
    case("<answer>Answer: (b)</answer>", 1.0),  # a lower-case letter in parentheses is a letter
    case("<answer>Option (d)</answer>", 1.0, truth="D"),
    case("<answer>(a) or (b)</answer>", 0.05),  # still a hedge
    case("<answer>I choose (c)</answer>", 1.0, truth="C"),  # "I" is the pronoun
]


def test_golden_cases() -> None:
    assert_reward_contract(MultipleChoiceReward(), CASES)
