"""Golden cases of the numerical reward (0.9·accuracy + 0.1·format)."""

from __future__ import annotations

import pytest

from videorl.api import ConfigError, RewardInput
from videorl.testing import assert_reward_contract
from videorl_rewards.numerical import NumericalReward


def case(response: str, expected: float, truth: str = "4") -> tuple[RewardInput, float]:
    return RewardInput(response, "numerical", truth, sample_id="n"), expected


CASES = [
    case("<answer>4</answer>", 1.0),
    case("<answer>four</answer>", 1.0),
    case("<answer>4.0</answer>", 1.0),
    case("<answer>5</answer>", 0.1),
    case("<answer>3 or 4</answer>", 0.05),  # two numbers: does not fit the type
    case("<answer>about four apples</answer>", 1.0),
    case("<answer>50%</answer>", 1.0, truth="0.5"),
    case("<answer>3/4</answer>", 1.0, truth="0.75"),
    case("<answer>1,000.5</answer>", 1.0, truth="1000"),  # relative error 5e-4 ≤ 1e-3
    case("<answer>1002</answer>", 0.1, truth="1000"),  # relative error 2e-3
    case("<answer>3.14</answer>", 1.0, truth="3.14159"),  # 5.1e-4
    case("", 0.0),
    case("<answer>nan</answer>", 0.05),
    case("<answer>4</answer><answer>5</answer>", 0.1),
    case("<answer>1e400</answer>", 0.05),  # overflows: no number
    case("the count is 4", 0.9),
]


def test_golden_cases() -> None:
    assert_reward_contract(NumericalReward(), CASES)


def test_tolerances() -> None:
    loose = NumericalReward(rel_tol=0.0, abs_tol=0.5)
    assert_reward_contract(loose, [case("<answer>4.4</answer>", 1.0), case("<answer>4.6</answer>", 0.1)])
    with pytest.raises(ConfigError, match="rel_tol must be a non-negative number"):
        NumericalReward(rel_tol=-1)
