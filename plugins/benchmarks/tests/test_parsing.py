"""Answer reading shared by the adapters (videorl_benchmarks.parsing) and the EasyVideoR1 templates."""

from __future__ import annotations

import pytest

from videorl.answers import mean_relative_accuracy
from videorl_benchmarks.files import split_inline_options
from videorl_benchmarks.parsing import (
    choice_letter,
    digits,
    final_text,
    parse_span,
    parse_st_answer,
    relative_accuracy,
    seconds,
    st_score,
    yes_no,
)

OPTIONS = ["red square", "green circle", "blue triangle", "yellow star"]


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("B", "B"),
        ("(C) blue triangle", "C"),
        ("<think>A looks wrong, maybe D</think><answer>B</answer>", "B"),
        ("Let me think. A is wrong. Therefore, the final answer is: D", "D"),
        ("<think>long reasoning about A and B</think>\nC.", "C"),
        ("The answer is \\boxed{A}", "A"),
        ("I think it is the green circle.", "B"),
        ("E", None),  # not an option
        ("A or B", None),  # a hedge
        ("", None),
        ("Final Answer: C", "C"),
    ],
)
def test_choice_letter(response: str, letter: str | None) -> None:
    assert choice_letter(response, OPTIONS) == letter


def test_final_text_prefers_the_last_answer_tag_then_the_final_statement() -> None:
    assert final_text("<answer>x</answer> then <answer> 42 </answer>") == "42"
    assert final_text("<think>a</think>So the final answer is: 7 apples.") == "7 apples"
    assert final_text("<think>only thinking</think>") == ""


@pytest.mark.parametrize(
    ("text", "span"),
    [
        ('<answer>{"time": [12.3, 25.7]}</answer>', [12.3, 25.7]),
        ('{"time": [30, 10]}', [10.0, 30.0]),
        ("[4.0, 9.5]", [4.0, 9.5]),
        ("The event happens in the 24.3 - 30.4 seconds.", [24.3, 30.4]),
        ("from 00:01:05 to 00:01:10.5", [65.0, 70.5]),
        ("It starts at 3.5s and it ends at 8 s", [3.5, 8.0]),
        ("no times here", None),
        ("", None),
    ],
)
def test_parse_span(text: str, span: list[float] | None) -> None:
    assert parse_span(text) == span


def test_seconds() -> None:
    assert seconds("75.5") == 75.5
    assert seconds("01:15.5") == 75.5
    assert seconds("1:01:15") == 3675.0


def test_relative_accuracy_is_inclusive_unlike_easyvideor1() -> None:
    # |10.5 - 10| / 10 = 0.05: meets θ = 0.95 only with the inclusive rule (VSI-Bench's official code)
    assert relative_accuracy(10.5, 10) == 1.0
    assert mean_relative_accuracy(10.5, 10) == 0.9
    # relative error 0.3: thresholds 0.50, 0.55, 0.60, 0.65, 0.70 (1 - θ ≥ 0.3) → 5 of 10
    assert relative_accuracy(13, 10) == 0.5
    assert mean_relative_accuracy(13, 10) == 0.4
    assert relative_accuracy(25, 10) == 0.0
    assert relative_accuracy(0, 0) == 1.0
    assert relative_accuracy(float("nan"), 1) == 0.0


def test_yes_no_and_digits() -> None:
    assert yes_no("Yes, the man jumps.") == "yes"
    assert yes_no("no") == "no"
    assert yes_no("I would say yes") == "yes"
    assert yes_no("yes and no") == "yes"  # how the answer starts decides (TempCompass)
    assert yes_no("maybe yes, maybe no") is None
    assert yes_no("") is None
    assert digits("He did it 1 and then 2 times") == "12"


def test_split_inline_options() -> None:
    stem, options = split_inline_options("What happens?\n(A) a cat\n(B) a dog\n  that barks\n(C) nothing")
    assert stem == "What happens?"
    assert options == ["a cat", "a dog that barks", "nothing"]
    assert split_inline_options("No options here") == ("No options here", [])


def test_spatio_temporal_answer_and_score() -> None:
    answer = parse_st_answer('<answer>{"time": [2, 6], "boxes": {"3": [0, 0, 10, 10], "4.0": [0, 0, 10, 10]}}</answer>')
    assert answer == {"time": [2.0, 6.0], "boxes": {"3": [0.0, 0.0, 10.0, 10.0], "4": [0.0, 0.0, 10.0, 10.0]}}
    truth = {"time": [2.0, 10.0], "boxes": {"3": [0, 0, 10, 20], "4": [0, 0, 10, 10], "9": [1, 1, 2, 2]}}
    # tIoU = 4/8 = 0.5; box IoUs over the seconds in both: 3 → 100/200 = 0.5, 4 → 1.0 → mean 0.75
    assert st_score(answer, truth) == pytest.approx(0.5 * 0.5 + 0.5 * 0.75)
    assert st_score(answer, {"time": [2.0, 6.0], "boxes": {}}) == 1.0  # truth without boxes: tIoU alone
    assert st_score(None, truth) == 0.0
    assert parse_st_answer("not json") is None
