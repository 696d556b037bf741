"""Golden cases of the spatial-grounding reward: box IoU across coordinate conventions."""

from __future__ import annotations

from typing import Any

import pytest

from videorl.api import MediaInfo, RewardInput
from videorl.testing import assert_reward_contract
from videorl_rewards.spatial_grounding import SpatialGroundingReward

# source 800×400, the model saw 400×200; the ground truth [200, 100, 600, 300] (source pixels) is
# the middle half of the frame: [0.25, 0.25, 0.75, 0.75] as fractions
MEDIA = MediaInfo(width=800, height=400, resized_width=400, resized_height=200)
TRUTH = '{"boxes": [200, 100, 600, 300]}'


def case(
    response: str, expected: float, family: str | None = "qwen3_vl", **extra: Any
) -> tuple[RewardInput, float]:
    truth = extra.pop("truth", TRUTH)
    inp = RewardInput(response, "spatial grounding", truth, media=MEDIA, model_family=family, extra=extra)
    return inp, expected


CASES = [
    case('<answer>{"boxes": [100, 50, 300, 150]}</answer>', 1.0, family="qwen2_5_vl"),  # resized pixels
    case('<answer>{"boxes": [250, 250, 750, 750]}</answer>', 1.0),  # 0–1000 grid
    case('<answer>{"boxes": [250, 250, 500, 750]}</answer>', 0.9 * 0.5 + 0.1),  # half the box
    case('<answer>{"boxes": [200, 100, 600, 300]}</answer>', 1.0, family=None),  # same convention
    case('<answer>[{"bbox_2d": [250, 250, 750, 750], "label": "dog"}]</answer>', 1.0),
    case('<answer>{"boxes": [750, 750, 250, 250]}</answer>', 0.05),  # reversed
    case('<answer>{"boxes": [[0, 0, 1, 1], [2, 2, 3, 3]]}</answer>', 0.05),  # two boxes
    case('<answer>{"boxes": [0, 0, 100, 100]}</answer>', 0.1),  # disjoint
    case("", 0.0),
    case('<answer>{"boxes": [1, 2,</answer>', 0.05),  # malformed JSON
    case('<answer>{"boxes": [NaN, 0, 1, 1]}</answer>', 0.05),
    case(
        '<answer>{"boxes": [100, 50, 300, 150]}</answer>',
        1.0,
        family="qwen2_5_vl",
        truth="[250, 250, 750, 750]",
        box_convention="grid1000",
    ),
    case('<answer>{"boxes": [250, 250, 750, 750]}</answer>', 1.0, family="qwen2_vl"),
]


def test_golden_cases() -> None:
    assert_reward_contract(SpatialGroundingReward(), CASES)


def test_pixel_conventions_need_media() -> None:
    inp = RewardInput(
        '<answer>{"boxes": [1, 1, 2, 2]}</answer>', "spatial grounding", TRUTH, model_family="qwen3_vl"
    )
    with pytest.raises(ValueError, match="needs the media's width/height"):
        SpatialGroundingReward()(inp)


def test_family_conventions_option() -> None:
    reward = SpatialGroundingReward(family_conventions={"my_model": "unit"})
    inp, _ = case('<answer>{"boxes": [0.25, 0.25, 0.75, 0.75]}</answer>', 1.0, family="my_model")
    out = reward(inp)
    assert out is not None and out.score == pytest.approx(1.0)
