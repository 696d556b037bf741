"""Golden cases of the spatial-temporal grounding reward: 0.5·tIoU + 0.5·mean IoU over all truth frames."""

from __future__ import annotations

import json
from typing import Any

import pytest

from videorl.api import RewardInput
from videorl.testing import assert_reward_contract
from videorl_rewards.spatial_temporal_grounding import SpatialTemporalGroundingReward

BOX = [0, 0, 100, 100]
HALF = [0, 0, 50, 100]  # IoU 0.5 with BOX
TRUTH = {"time": [2, 6], "boxes": {str(s): BOX for s in range(2, 6)}}


def case(value: Any, expected: float, truth: Any = TRUTH) -> tuple[RewardInput, float]:
    response = value if isinstance(value, str) else f"<answer>{json.dumps(value)}</answer>"
    inp = RewardInput(
        response, "spatial-temporal grounding", json.dumps(truth), extra={"box_convention": "grid1000"}
    )
    return inp, expected


CASES = [
    case(TRUTH, 1.0),
    case({"time": [2, 6], "boxes": {"2": BOX}}, 0.9 * (0.5 + 0.5 * 0.25) + 0.1),  # one frame of four
    case({"time": [4, 8], "boxes": TRUTH["boxes"]}, 0.9 * (0.5 / 3 + 0.5) + 0.1),
    case({"time": [2, 6], "boxes": {}}, 0.9 * 0.5 + 0.1),
    case({"time": [2, 6]}, 0.9 * 0.5 + 0.1),  # boxes absent
    case({"time": [6, 2], "boxes": TRUTH["boxes"]}, 0.05),  # reversed span
    case({"time": [4, 8]}, 0.9 / 3 + 0.1, truth={"time": [2, 6], "boxes": {}}),  # truth without boxes: tIoU
    case("", 0.0),
    case('<answer>{"time": [2, 6], "boxes": {</answer>', 0.05),
    case({"time": [2, 6], "boxes": {str(s): HALF for s in range(2, 6)}}, 0.9 * 0.75 + 0.1),
    case({"boxes": TRUTH["boxes"]}, 0.05),  # no time
]


def test_golden_cases() -> None:
    assert_reward_contract(SpatialTemporalGroundingReward(), CASES)


def test_parts() -> None:
    out = SpatialTemporalGroundingReward()(case({"time": [4, 8], "boxes": {"2": BOX}}, 0)[0])
    assert out is not None
    assert out.parts["tiou"] == pytest.approx(1 / 3) and out.parts["miou"] == pytest.approx(0.25)
