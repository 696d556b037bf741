"""Golden cases of the tracking reward: mean IoU over all ground-truth frames, missing = 0."""

from __future__ import annotations

import json

from videorl.api import RewardInput
from videorl.testing import assert_reward_contract
from videorl_rewards.tracking import TrackingReward

BOXES = {"0": [0, 0, 100, 100], "1": [100, 0, 200, 100], "2": [200, 0, 300, 100], "3": [300, 0, 400, 100]}
TRUTH = json.dumps({"boxes": BOXES})


def answer(boxes: object) -> str:
    return f"<answer>{json.dumps({'boxes': boxes})}</answer>"


def case(response: str, expected: float) -> tuple[RewardInput, float]:
    return RewardInput(
        response, "tracking", TRUTH, sample_id="t", extra={"box_convention": "grid1000"}
    ), expected


CASES = [
    case(answer(BOXES), 1.0),
    case(answer({"0": BOXES["0"]}), 0.9 * 0.25 + 0.1),  # one correct frame cannot earn full marks
    case(answer({k: BOXES[k] for k in "012"}), 0.9 * 0.75 + 0.1),
    case(answer({**BOXES, "3": [300, 0, 350, 100]}), 0.9 * 3.5 / 4 + 0.1),  # last frame IoU 0.5
    case(answer({**BOXES, "9": [0, 0, 1, 1]}), 1.0),  # frames beyond the ground truth are ignored
    case(answer({f"{k}.0": v for k, v in BOXES.items()}), 1.0),  # keys compared as numbers
    case(f"<answer>{json.dumps([{'time': int(k), 'bbox_2d': v} for k, v in BOXES.items()])}</answer>", 1.0),
    case(answer({}), 0.05),
    case("", 0.0),
    case(answer([0, 0, 1, 1]), 0.05),  # not per frame
    case(answer({**BOXES, "0": [100, 100, 0, 0]}), 0.9 * 0.75 + 0.1),  # a reversed box is left out
    case('<answer>{"boxes": {"0": [0, 0, 100, 100]</answer>', 0.05),  # malformed JSON
]


def test_golden_cases() -> None:
    assert_reward_contract(TrackingReward(), CASES)
