"""Golden cases of the temporal-grounding reward (0.9·tIoU + 0.1·format)."""

from __future__ import annotations

from typing import Any

from videorl.api import RewardInput
from videorl.testing import assert_reward_contract
from videorl_rewards.temporal_grounding import TemporalGroundingReward


def case(response: str, expected: float, truth: Any = '{"time": [2, 6]}') -> tuple[RewardInput, float]:
    return RewardInput(response, "temporal grounding", truth, sample_id="tg"), expected


CASES = [
    case('<answer>{"time": [2, 6]}</answer>', 1.0),
    case('<answer>{"time": [4, 8]}</answer>', 0.9 / 3 + 0.1),  # overlap 2, span 6
    case("<answer>[0, 10]</answer>", 0.9 * 0.4 + 0.1),  # overlap 4, span 10
    case("<answer>from 3 to 5 seconds</answer>", 0.9 * 0.5 + 0.1),
    case('<answer>{"time": [6, 2]}</answer>', 0.05),  # reversed
    case('<answer>{"time": [NaN, 3]}</answer>', 0.05),
    case('<answer>{"time": [10, 12]}</answer>', 0.1),
    case("", 0.0),
    case('<answer>{"time": [2, </answer>', 0.05),  # malformed JSON
    case('<answer>{"time": [2, 6]}</answer><answer>{"time": [0, 1]}</answer>', 0.1),
    case('<answer>{"time": [2, 6]}</answer>', 1.0, truth='<think>{"time": [2, 6]}</think>'),  # Charades quirk
    case("<answer>00:02 - 00:06</answer>", 1.0),
    case('<answer>{"time": [2, 6, 8]}</answer>', 0.05),
    case('<answer>{"time": [2, 6]}</answer>', 1.0, truth={"time": [2, 6]}),
]


def test_golden_cases() -> None:
    assert_reward_contract(TemporalGroundingReward(), CASES)
