"""Golden cases of the boolean reward (0.9·accuracy + 0.1·format)."""

from __future__ import annotations

from videorl.api import RewardInput
from videorl.testing import assert_reward_contract
from videorl_rewards.boolean import BooleanReward, parse_boolean


def case(response: str, expected: float, truth: str = "yes") -> tuple[RewardInput, float]:
    return RewardInput(response, "binary classification", truth, sample_id="b"), expected


CASES = [
    case("<answer>yes</answer>", 1.0),
    case("<answer>Yes.</answer>", 1.0),
    case("<answer>true</answer>", 1.0),
    case("<answer>no</answer>", 0.1),
    case("<answer>yes or no</answer>", 0.05),  # both: a hedge
    case("<answer>maybe</answer>", 0.05),
    case("<answer>No, it is not true.</answer>", 0.1),  # the leading word decides
    case("<answer>no</answer>", 1.0, truth="false"),
    case("", 0.0),
    case("<answer>1</answer>", 1.0),
    case("Yes, definitely", 0.9),
    case("<answer>The answer is yes</answer>", 1.0),
    case("yes " * 250_000, 0.9),  # 1 MB of one polarity, untagged
]


def test_golden_cases() -> None:
    assert_reward_contract(BooleanReward(), CASES)


def test_parse_boolean() -> None:
    assert [parse_boolean(t) for t in ("Y", "FALSE", True, "yes no", "")] == ["yes", "no", "yes", None, None]
