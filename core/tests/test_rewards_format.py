"""The format rule and the TaskReward base: extraction, the last <answer>, fallback, weights."""

from __future__ import annotations

from typing import Any

import pytest

from videorl.errors import ConfigError, DataError
from videorl.rewards import FormatRule, RewardInput, TaskReward


class Letter(TaskReward):
    """A letter A-D; accuracy 1 when equal to the ground truth."""

    name = "letter"

    def parse_answer(self, text: Any, inp: RewardInput) -> str | None:
        text = str(text).strip()
        return text if text in ("A", "B", "C", "D") else None

    def accuracy(self, answer: str, truth: str, inp: RewardInput) -> float:
        return float(answer == truth)


def score(reward: TaskReward, response: str, truth: Any = "A") -> tuple[float, dict[str, float]]:
    out = reward(RewardInput(response=response, problem_type="letter", ground_truth=truth, sample_id="s1"))
    assert out is not None
    return out.score, out.parts


@pytest.mark.parametrize(
    ("response", "expected", "fmt"),
    [
        ("<answer>A</answer>", 1.0, 1.0),
        ("<answer>B</answer>", 0.1, 1.0),
        ("<answer>A</answer><answer>B</answer>", 0.1, 1.0),  # the last answer counts
        ("<answer>B</answer> no wait <answer>A</answer>", 1.0, 1.0),
        ("", 0.0, 0.0),
        ("A", 0.9, 0.0),  # fallback: correct but without the tag
        ("<answer>zzz</answer>", 0.05, 0.5),  # tag present, content does not fit the type
        ("< answer >A</ANSWER>", 1.0, 1.0),
        ("<think>A</think><answer></answer>", 0.05, 0.5),  # the reasoning is not the answer
        ("<think>hm</think>The final answer is: A", 0.9, 0.0),
    ],
)
def test_default_rule(response: str, expected: float, fmt: float) -> None:
    got, parts = score(Letter(), response)
    assert got == pytest.approx(expected)
    assert parts["format"] == fmt


def test_ground_truth_wrapped_in_answer_tags() -> None:
    assert score(Letter(), "<answer>C</answer>", "<answer>C</answer>")[0] == pytest.approx(1.0)
    assert score(Letter(), "<answer>C</answer>", "$C$")[0] == pytest.approx(1.0)


def test_without_fallback_an_untagged_answer_earns_nothing() -> None:
    assert score(Letter(fallback=False), "A")[0] == 0.0


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("<answer>A</answer>", 0.9),  # no reasoning: format 0
        ("<think>because</think><answer>A</answer>", 1.0),
        ("<think>  </think><answer>A</answer>", 0.9),  # empty reasoning does not count
        ("reasoning opened by the chat template</think>\n<answer>A</answer>", 1.0),
        ("<answer>A</answer><think>after</think>", 0.9),  # reasoning must come first
    ],
)
def test_think_required(response: str, expected: float) -> None:
    assert score(Letter(format_rule={"think": "required"}), response)[0] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("response", "think", "expected"),
    [
        ("<think>x</think>\n<answer>A</answer>\n", "optional", 1.0),
        ("<answer>A</answer>", "optional", 1.0),
        ("<answer>A</answer>", "required", 0.9),
        ("hello <answer>A</answer>", "optional", 0.9),  # text outside the tags
        ("<answer>B</answer><answer>A</answer>", "optional", 0.9),  # two answers
        ("<think>a</think><think>b</think><answer>A</answer>", "optional", 0.9),
        ("thinking</think><answer>A</answer>", "required", 1.0),
    ],
)
def test_strict(response: str, think: str, expected: float) -> None:
    reward = Letter(format_rule=FormatRule(think=think, strict=True))
    assert score(reward, response)[0] == pytest.approx(expected)


def test_weights() -> None:
    reward = Letter(accuracy_weight=0.5, format_weight=0.5)
    assert score(reward, "<answer>B</answer>")[0] == pytest.approx(0.5)
    assert score(reward, "A")[0] == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="must be 1"):
        Letter(accuracy_weight=0.9, format_weight=0.2)
    with pytest.raises(ConfigError, match="non-negative"):
        Letter(accuracy_weight=1.1, format_weight=-0.1)


def test_format_rule_errors() -> None:
    with pytest.raises(ConfigError, match="format.think must be one of optional, required"):
        FormatRule(think="always")
    with pytest.raises(ConfigError, match="unknown format key"):
        FormatRule.from_value({"thinking": "required"})


def test_bad_ground_truth_names_the_sample() -> None:
    with pytest.raises(DataError, match="sample 's1'.*'Z'.*not a valid letter answer"):
        score(Letter(), "<answer>A</answer>", "Z")


def test_one_megabyte_response() -> None:
    assert score(Letter(), "A" * 1_000_000 + "<answer>A</answer>")[0] == pytest.approx(1.0)
    assert score(Letter(), "<think>" + "x" * 1_000_000)[0] == 0.0
