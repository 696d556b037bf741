"""Golden cases of the regression (MRA) reward (0.9·accuracy + 0.1·format)."""

from __future__ import annotations

from videorl.api import RewardInput
from videorl.testing import assert_reward_contract
from videorl_rewards.regression import RegressionReward


def case(response: str, expected: float, truth: str = "100") -> tuple[RewardInput, float]:
    return RewardInput(response, "regression", truth, sample_id="r"), expected


CASES = [
    case("<answer>100</answer>", 1.0),
    case("<answer>105</answer>", 0.9 * 0.9 + 0.1),  # error 0.05 is not < 1 − 0.95
    case("<answer>96</answer>", 1.0),  # error 0.04 < 0.05
    case("<answer>90</answer>", 0.9 * 0.8 + 0.1),
    case("<answer>80</answer>", 0.9 * 0.6 + 0.1),  # 0.20 < 0.50, 0.45, 0.40, 0.35, 0.30, 0.25
    case("<answer>70</answer>", 0.9 * 0.4 + 0.1),
    case("<answer>50</answer>", 0.1),
    case("<answer>150</answer>", 0.1),
    case("<answer>one hundred</answer>", 1.0),
    case("", 0.0),
    case("<answer>lots</answer>", 0.05),
    case("<answer>0</answer>", 1.0, truth="0"),
    case("<answer>100</answer><answer>50</answer>", 0.1),
]


def test_golden_cases() -> None:
    assert_reward_contract(RegressionReward(), CASES)


def test_inclusive_thresholds() -> None:
    assert_reward_contract(RegressionReward(inclusive=True), [case("<answer>105</answer>", 1.0)])
