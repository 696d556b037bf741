from __future__ import annotations

from typing import Any

import pytest
from videorl_reward_counting.reward import CountingReward, parse_count

from videorl.api import RewardInput
from videorl.testing import assert_reward_contract


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("3", 3),
        ("three", 3),
        ("There are 12 cars", 12),
        ("Twenty", 20),
        ("2.0", 2),
        ("2.5", None),
        ("2 or 3", None),
        ("none", None),
        ("", None),
    ],
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
    assert plugins["videorl-reward-counting"]["components"] == {
        "prompt_templates": ["counting", "counting/thinking"],
        "rewards": ["counting"],
    }


def test_both_prompt_variants_render_for_every_spelling(videorl_plugins: Any) -> None:
    from videorl_reward_counting import plugin

    from videorl.api import render_prompt

    templates = videorl_plugins(plugin).prompt_templates
    for spelling in ("counting", "Object Counting", "count"):
        sample = {"problem": "How many cups?", "problem_type": spelling}
        plain = render_prompt(templates, sample, thinking=False)
        thinking = render_prompt(templates, sample, thinking=True)
        assert plain == (
            "How many cups?\n\nGive only the count as a number (for example <answer>3</answer>) between "
            "<answer> and </answer>, and nothing else."
        )
        assert thinking.startswith(
            "How many cups?\n\nFirst think through the question step by step between <think>"
        )


def test_the_absolute_error_is_a_part_of_its_own() -> None:
    out = CountingReward()(RewardInput("<answer>7</answer>", "counting", "4"))
    assert out is not None and out.parts == {"accuracy": 0.0, "format": 1.0, "abs_error": 3.0}


def test_a_ground_truth_that_is_no_count_names_the_shape() -> None:
    from videorl.api import DataError

    with pytest.raises(DataError, match=r"\(a list\) is not a valid counting answer; expected a whole count"):
        CountingReward().check_ground_truth(RewardInput("", "counting", [3], sample_id="s1"))
