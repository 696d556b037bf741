from __future__ import annotations

from typing import Any

import pytest
from videorl_reward_counting.reward import CountingReward, parse_count

from videorl.api import RewardInput
from videorl.testing import assert_reward_contract


@pytest.mark.parametrize(
    ("text", "count"),
    [("3", 3), ("three", 3), ("There are 12 cars", 12), ("Twenty", 20), ("2.0", 2), ("2.5", None),
     ("2 or 3", None), ("none", None), ("", None)],
)
def test_parse_count(text: str, count: int | None) -> None:
    assert parse_count(text) == count


def test_reward_contract() -> None:
    def case(response: str, truth: Any = "4") -> RewardInput:
        return RewardInput(response=response, problem_type="counting", ground_truth=truth)

    assert_reward_contract(
        CountingReward(),
        [
            (case("<answer>4</answer>"), 1.0),
            (case("<think>maybe 3</think><answer>four</answer>"), 1.0),
            (case("<answer>3</answer><answer>4</answer>"), 1.0),
            (case("<answer>4</answer><answer>5</answer>"), 0.0),
            (case("<answer>4 or 5</answer>"), 0.0),
            (case("4"), 0.0),
            (case("<answer>4</answer>", truth=4), 1.0),
        ],
    )


def test_plugin_is_listed(run_cli: Any) -> None:
    plugins = {p["name"]: p for p in run_cli("plugins", "--json").assert_success().json()}
    assert plugins["videorl-reward-counting"]["components"] == {"rewards": ["counting"]}
