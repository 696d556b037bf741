"""The shared extraction rules of BaseBenchmark (built on videorl.answers) and the STVG answer and score."""

from __future__ import annotations

from typing import Any

import pytest

from videorl.api import BenchmarkRow
from videorl_benchmarks.base import BaseBenchmark
from videorl_benchmarks.spatiotemporal import parse_st_answer, st_score

OPTIONS = ["red square", "green circle", "blue triangle", "yellow star"]


def row(problem_type: str, answer: Any = None, options: list[str] | None = None) -> BenchmarkRow:
    return BenchmarkRow(id="r", problem="q", answer=answer, problem_type=problem_type, options=options)


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("<think>A looks wrong, maybe D</think><answer>B</answer>", "B"),
        ("Let me think. A is wrong. Therefore, the final answer is: D", "D"),
        ("I think it is the green circle.", "B"),
        ("<answer>unsure</answer> Final Answer: C", "C"),  # a tag without a letter does not end the search
        ("E", None),  # not an option
        ("A or B", None),  # a hedge
    ],
)
def test_multiple_choice_reads_the_whole_response(response: str, letter: str | None) -> None:
    assert BaseBenchmark().extract(row("multiple_choice", options=OPTIONS), response) == letter


def test_bare_options_are_lettered_by_position_even_when_they_look_lettered() -> None:
    options = ["C. elegans", "E. coli"]  # option texts (letters stripped at load) that start like a label
    assert BaseBenchmark().extract(row("multiple_choice", options=options), "B") == "B"
    assert BaseBenchmark().extract(row("multiple_choice", options=options), "It is E. coli") == "B"


@pytest.mark.parametrize(
    ("response", "span"),
    [
        ('<answer>{"time": [30, 10]}</answer>', [10.0, 30.0]),  # reversed: swapped (lmms-eval)
        ("The event happens in the 24.3 - 30.4 seconds.", [24.3, 30.4]),
        ("It starts at 3.5s and it ends at 8 s", [3.5, 8.0]),
        ('<think>{"time": [1, 2]}</think><answer>not sure</answer>', [1.0, 2.0]),  # JSON anywhere
        ("no times here", None),
    ],
)
def test_temporal_grounding_extraction(response: str, span: list[float] | None) -> None:
    assert BaseBenchmark().extract(row("temporal_grounding"), response) == span


@pytest.mark.parametrize(
    ("response", "answer"),
    [("Yes, the man jumps.", "yes"), ("yes and no", "yes"), ("maybe yes, maybe no", None), ("", None)],
)
def test_yes_no_first_word_decides(response: str, answer: str | None) -> None:
    assert BaseBenchmark().extract(row("yes_no"), response) == answer


def test_regression_uses_the_inclusive_mra_of_vsibench() -> None:
    # |10.5 - 10| / 10 = 0.05 meets θ = 0.95 only with VSI-Bench's ≤ (EasyVideoR1's < gives 0.9)
    assert BaseBenchmark().score(row("regression", answer=10.0), 10.5) == 1.0
    # relative error 0.3: θ = 0.50 … 0.70 → 5 of 10
    assert BaseBenchmark().score(row("regression", answer=10.0), 13.0) == 0.5


def test_spatio_temporal_answer_and_score() -> None:
    answer = parse_st_answer(
        '<answer>{"time": [2, 6], "boxes": {"3": [0, 0, 10, 10], "4.0": [0, 0, 10, 10]}}</answer>'
    )
    assert answer == {"time": [2.0, 6.0], "boxes": {"3": [0.0, 0.0, 10.0, 10.0], "4": [0.0, 0.0, 10.0, 10.0]}}
    truth = {"time": [2.0, 10.0], "boxes": {"3": [0, 0, 10, 20], "4": [0, 0, 10, 10], "9": [1, 1, 2, 2]}}
    # tIoU = 4/8 = 0.5; box IoUs over the seconds in both: 3 → 100/200 = 0.5, 4 → 1.0 → mean 0.75
    assert st_score(answer, truth) == pytest.approx(0.5 * 0.5 + 0.5 * 0.75)
    assert st_score(answer, {"time": [2.0, 6.0], "boxes": {}}) == 1.0  # truth without boxes: tIoU alone
    assert st_score(None, truth) == 0.0
    assert parse_st_answer("not json") is None


def test_spatio_temporal_answer_in_prose_keeps_the_outer_object() -> None:
    text = 'Here: {"time": [6, 2], "boxes": {"2": [1, 1, 5, 5], "x": [0, 0, 1, 1], "3": [0, 0, 1]}} done'
    # the whole object, not an inner bracket; span swapped; bad keys and short boxes left out
    assert parse_st_answer(text) == {"time": [2.0, 6.0], "boxes": {"2": [1.0, 1.0, 5.0, 5.0]}}
    assert parse_st_answer('{"boxes": {"1": [0, 0, 2, 2]}}') == {
        "time": None,
        "boxes": {"1": [0.0, 0.0, 2.0, 2.0]},
    }
    assert parse_st_answer('{"time": "later"}') is None
