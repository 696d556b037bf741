"""Golden tests of videorl.answers: every expected value is computed by hand."""

from __future__ import annotations

import math
import time

import pytest

from videorl.answers import (
    MRA_FLOAT_THRESHOLDS,
    answer_candidates,
    answer_choice,
    answer_text,
    box_iou,
    convert_box,
    extract_boxed,
    extract_choice,
    extract_tag,
    final_statement,
    interval_iou,
    mean_relative_accuracy,
    normalize_tags,
    option_map,
    parse_boolean,
    parse_interval,
    parse_json_answer,
    parse_number,
    parse_seconds,
    strip_math_delimiters,
    strip_option_letter,
    strip_think,
)
from videorl.media.info import MediaInfo


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>A</answer>", "A"),
        ("<answer>A</answer> so <answer>B</answer>", "B"),  # the last one counts
        ("<answer><answer>B</answer>", "B"),  # innermost opening before the last closing
        ("< Answer >C< / ANSWER >", "C"),  # tag spelling repaired
        ("<answer>  x / y  </answer>", "x / y"),  # content untouched (spaces around / kept)
        ("no tags at all", None),
        ("<answer>unclosed", None),
        ("</answer><answer>", None),
        ("<answer></answer>", ""),
    ],
)
def test_extract_tag(text: str, expected: str | None) -> None:
    assert extract_tag(text) == expected


def test_extract_tag_is_fast_on_a_megabyte() -> None:
    text = "A" * 1_000_000 + "<answer>Z</answer>"
    start = time.perf_counter()
    assert extract_tag(text) == "Z"
    assert extract_tag("<answer>" * 100_000) is None
    assert (
        time.perf_counter() - start < 20.0
    )  # linear takes milliseconds; quadratic on this input would take hours


def test_normalize_tags_touches_only_tags() -> None:
    assert (
        normalize_tags("<THINK>a < b</Think >< answer>1 / 2</answer>")
        == "<think>a < b</think><answer>1 / 2</answer>"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>reasoning</think> final", "final"),
        ("<think>never closed", ""),
        ("reasoning opened by the template</think>answer", "answer"),
        ("before <think>hidden", "before"),
        ("plain", "plain"),
    ],
)
def test_strip_think(text: str, expected: str) -> None:
    assert strip_think(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"a \boxed{1} b \boxed{2}", "2"),
        (r"\boxed{x", None),
        (r"\boxed{1} then \boxed{", "1"),  # an unbalanced last one falls back to the one before
        (r"so \boxed 5 done", "5"),
        (r"\fbox{A}", "A"),
        ("nothing", None),
    ],
)
def test_extract_boxed(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


def test_extract_boxed_is_linear() -> None:
    start = time.perf_counter()
    assert extract_boxed("\\boxed{" * 150_000) is None
    assert (
        time.perf_counter() - start < 20.0
    )  # linear takes milliseconds; quadratic on this input would take hours


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Therefore, the final answer is: B.", "B"),
        ("The answer is $42$", "42"),
        ("Final answer: \\boxed{7}", "7"),
        ("To find the answer, we look closer.", None),
        ("The answer is 3.\nWait.\nSo the correct answer is 4;", "4"),
    ],
)
def test_final_statement(text: str, expected: str | None) -> None:
    assert final_statement(text) == expected


def test_answer_candidates_order() -> None:
    response = "<think>maybe \\boxed{9}</think>It is \\boxed{3}.\nThe final answer is 3"
    assert answer_candidates(response) == ["3", "It is \\boxed{3}.\nThe final answer is 3"]
    assert answer_candidates("") == []


def test_answer_text_prefers_the_last_answer_tag_then_the_final_statement() -> None:
    assert answer_text("<answer>x</answer> then <answer> 42 </answer>") == "42"
    assert answer_text("<think>a</think>So the final answer is: 7 apples.") == "7 apples"
    assert answer_text("<think>a</think>It is \\boxed{3} I think") == "3"
    assert answer_text("<answer></answer> the final answer is 5") == ""  # an empty tag is the answer
    assert answer_text("<think>only thinking</think>") == ""
    assert answer_text("") == ""


def test_strip_math_delimiters() -> None:
    assert strip_math_delimiters("$x$") == "x"
    assert strip_math_delimiters("$$x+1$$") == "x+1"
    assert strip_math_delimiters("\\(y\\)") == "y"
    assert strip_math_delimiters("$") == "$"


OPTIONS = ["A. red", "B. blue", "C. dark red", "D. green"]


@pytest.mark.parametrize(
    ("text", "options", "expected"),
    [
        ("B", None, "B"),
        ("(C)", None, "C"),
        ("d", None, "D"),
        ("B. blue", OPTIONS, "B"),
        ("The answer is (B).", None, "B"),
        ("I choose C", None, "C"),
        ("答案是D", None, "D"),
        ("\\boxed{A}", None, "A"),
        ("A or B", None, None),  # a hedge is no answer
        ("blue", OPTIONS, "B"),  # option text
        ("It is dark red.", OPTIONS, "C"),  # "red" inside "dark red" does not count twice
        ("red or green", OPTIONS, None),
        ("E", OPTIONS, None),  # not one of the options
        ("the answer is a dog", None, None),  # lower-case article is no letter
        ("", None, None),
        ("Option B is the correct one", None, "B"),
        ("The best answer is: J", None, "J"),
        # a lower-case letter in parentheses is unambiguous; bare lower-case stays a word, "I" a pronoun
        ("(b)", OPTIONS, "B"),
        ("Answer: (c)", OPTIONS, "C"),
        ("Option (d)", OPTIONS, "D"),
        ("I choose (b)", None, "B"),
        ("(a) dark red", None, "A"),
        ("I think (b)", None, "B"),
        ("I think B", None, "B"),
        ("Answer: I think it is b", None, None),
        ("I is the correct answer", None, "I"),  # option I, not the pronoun
        ("answer: b", None, None),
        ("(a) or (b)", None, None),
        ("(A) or (B)", None, None),
        ("The answer is A or B", None, None),
        ("A/B", None, None),
        ("(e)", OPTIONS, None),
    ],
)
def test_extract_choice(text: str, options: list[str] | None, expected: str | None) -> None:
    assert extract_choice(text, options) == expected


def test_option_map_formats() -> None:
    assert option_map(["(A) cat", "B: dog", "C) cow"]) == {"A": "cat", "B": "dog", "C": "cow"}
    assert option_map(["cat", "dog"]) == {"A": "cat", "B": "dog"}
    assert option_map(None) == {}
    # a mapping is letter → text already: a text that looks lettered stays whole
    assert option_map({"a": " C. elegans", "B": "E. coli"}) == {"A": "C. elegans", "B": "E. coli"}
    assert option_map(["C. elegans", "E. coli"]) == {"C": "elegans", "E": "coli"}


def test_strip_option_letter() -> None:
    assert [strip_option_letter(o) for o in ("A. red", "(B) blue", "C: dark red", "D) x", "E、y")] == [
        "red", "blue", "dark red", "x", "y",
    ]  # fmt: skip
    assert strip_option_letter("  A man runs ") == "A man runs"  # no delimiter after the letter
    assert strip_option_letter(3) == "3"


BARE = ["red square", "green circle", "blue triangle", "yellow star"]
LETTERED = dict(zip("ABCD", BARE))


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
        ("<answer>the green circle</answer>", "B"),
        ("<answer>not sure</answer> so the final answer is C", "C"),  # a tag without a letter: search on
        ("E", None),  # not an option
        ("A or B", None),  # a hedge
        ("", None),
        ("Final Answer: C", "C"),
        ("<answer>Answer: (b)</answer>", "B"),
        ("<think>maybe (a)</think><answer>Option (d)</answer>", "D"),
    ],
)
def test_answer_choice(response: str, letter: str | None) -> None:
    assert answer_choice(response, LETTERED) == letter
    assert answer_choice(response, BARE) == letter


def test_answer_choice_without_options_accepts_any_letter() -> None:
    assert answer_choice("<answer>J</answer>") == "J"
    assert answer_choice("no letter here at all, honestly") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", 42.0),
        ("-3.5", -3.5),
        ("1,234.5 m", 1234.5),
        ("3/4", 0.75),
        ("\\frac{3}{4}", 0.75),
        ("50%", 0.5),
        ("twenty-five", 25.0),
        ("one hundred and five", 105.0),
        ("3 or 4", None),  # several different numbers
        ("5 (five)", 5.0),  # one number said twice
        ("about 12 cm", 12.0),
        ("1e3", 1000.0),
        ("no number here", None),
        ("1/0", None),
        ("$7$", 7.0),
        (2.5, 2.5),
        (True, None),
        (float("nan"), None),
        (".5", 0.5),
    ],
)
def test_parse_number(text: object, expected: float | None) -> None:
    got = parse_number(text)
    assert got == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize(
    ("text", "hedge", "leading"),
    [
        ("yes", "yes", "yes"),
        ("Yes.", "yes", "yes"),
        ("TRUE", "yes", "yes"),
        ("Y", "yes", "yes"),
        ("1", "yes", "yes"),
        ("  0 .                    ", "no", "no"),  # spaces and punctuation around one word
        ("n", "no", "no"),
        ("false", "no", "no"),
        ("No, it is not true.", "no", "no"),  # the leading word decides over "true"
        ("Yes, the man jumps.", "yes", "yes"),
        ("I would say yes", "yes", "yes"),
        ("The answer is yes, it is true", "yes", "yes"),  # one polarity
        ("yes and no", None, "yes"),  # both: a hedge, unless the first word wins (TempCompass)
        ("yes no", None, "yes"),
        ("maybe yes, maybe no", None, None),  # does not start with one: both is a hedge either way
        ("maybe", None, None),
        ("yesterday nobody came", None, None),  # words, not substrings
        ("", None, None),
        (True, "yes", "yes"),
        (False, "no", "no"),
        ("Nope", "no", "no"),  # colloquial words and bare negations are answers (TempCompass)
        ("Nope, it goes left.", "no", "no"),
        ("Yeah.", "yes", "yes"),
        ("Definitely not.", "no", "no"),
        ("Of course not", "no", "no"),
        ("Not at all.", "no", "no"),
        ("not sure", None, None),  # not a negation of the statement
        ("Why not?", None, None),
        ("nope, yes", None, "no"),
    ],
)
def test_parse_boolean(text: object, hedge: str | None, leading: str | None) -> None:
    assert parse_boolean(text) == hedge
    assert parse_boolean(text, leading_wins=True) == leading


def test_parse_boolean_on_a_megabyte() -> None:
    assert parse_boolean("yes " * 250_000) == "yes"
    assert parse_boolean("yes " * 250_000 + "no") is None
    assert parse_boolean("A" * 1_000_000 + " false") == "no"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('```json\n{"a": 1}\n```', {"a": 1}),
        ('the span is {"time": [1, 2]} I think', {"time": [1, 2]}),
        ("{'a': 1}", {"a": 1}),
        ('I think [maybe {"time": [1, 2]}', {"time": [1, 2]}),
        ('{"a": 1} and then {"b": 2}', {"b": 2}),
        ("{bad", None),
        ("[1, 2]", [1, 2]),
        ("[" * 100_000, None),
        ("", None),
        (None, None),
    ],
)
def test_parse_json_answer(text: str | None, expected: object) -> None:
    assert parse_json_answer(text) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('{"time": [2.5, 7]}', [2.5, 7.0]),
        ("[1, 2]", [1.0, 2.0]),
        ("from 2.5 to 7 seconds", [2.5, 7.0]),
        ("00:12 - 01:25", [12.0, 85.0]),
        ('{"time": [3, 1]}', [3.0, 1.0]),  # order kept
        ({"time": [[4, 5]]}, [4.0, 5.0]),
        ('{"time": [1, "x"]}', None),
        ("no span", None),
        ('<answer>{"time": [12.3, 25.7]}</answer>', [12.3, 25.7]),
        ("The event happens in the 24.3 - 30.4 seconds.", [24.3, 30.4]),
        ("from 00:01:05 to 00:01:10.5", [65.0, 70.5]),
        ("It starts at 3.5s and it ends at 8 s", [3.5, 8.0]),
        ("The action begins around 0:12, and finishes at 0:20.", [12.0, 20.0]),
        ("It restarts at 4 and the legend says 9", None),  # "start"/"end" inside other words
        ("It starts at 3 s.", None),  # no end
        ("", None),
        (None, None),
    ],
)
def test_parse_interval(value: object, expected: list[float] | None) -> None:
    assert parse_interval(value) == expected


@pytest.mark.parametrize(
    ("value", "kept", "swapped"),
    [
        ('{"time": [30, 10]}', [30.0, 10.0], [10.0, 30.0]),
        ("from 9 to 4 seconds", [9.0, 4.0], [4.0, 9.0]),
        ([2, 6], [2.0, 6.0], [2.0, 6.0]),
        ("no span", None, None),
    ],
)
def test_parse_interval_sort(value: object, kept: list[float] | None, swapped: list[float] | None) -> None:
    assert parse_interval(value) == kept
    assert parse_interval(value, sort=True) == swapped


def test_parse_seconds() -> None:
    assert parse_seconds("75.5") == 75.5
    assert parse_seconds("01:15.5") == 75.5
    assert parse_seconds("01:00:01") == 3601.0
    assert parse_seconds("1:01:15") == 3675.0
    assert parse_seconds(" 12 ") == 12.0
    assert parse_seconds("12 s") is None
    assert parse_seconds("1:2:3:4") is None


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([0, 10], [5, 15], 5 / 15),
        ([2, 4], [2, 4], 1.0),
        ([0, 1], [2, 3], 0.0),
        ([10, 0], [0, 10], 0.0),  # reversed
        ([float("nan"), 1], [0, 1], 0.0),
        ([2, 4], [0, 10], 0.2),
        ([3, 3], [3, 3], 0.0),  # empty
        ("x", [0, 1], 0.0),
        ([True, 1], [0, 1], 0.0),
    ],
)
def test_interval_iou(a: object, b: object, expected: float) -> None:
    assert interval_iou(a, b) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([0, 0, 10, 10], [5, 5, 15, 15], 25 / 175),
        ([0, 0, 10, 10], [0, 0, 10, 10], 1.0),
        ([0, 0, 1, 1], [2, 2, 3, 3], 0.0),
        ([10, 0, 0, 10], [0, 0, 10, 10], 0.0),
        ([0, 0, 10, 10], [0, 0, 10, 5], 0.5),
        ([0, 0, 10], [0, 0, 10, 10], 0.0),
        ([0, 0, math.inf, 1], [0, 0, 1, 1], 0.0),
    ],
)
def test_box_iou(a: object, b: object, expected: float) -> None:
    assert box_iou(a, b) == pytest.approx(expected)


def test_convert_box() -> None:
    media = MediaInfo(width=800, height=400, resized_width=400, resized_height=200)
    assert convert_box([100, 50, 300, 150], "pixels", "grid1000", media) == pytest.approx(
        [250, 250, 750, 750]
    )
    assert convert_box([100, 50, 300, 150], "source_pixels", "unit", media) == pytest.approx(
        [0.125, 0.125, 0.375, 0.375]
    )
    assert convert_box([250, 250, 750, 750], "grid1000", "source_pixels", media) == pytest.approx(
        [200, 100, 600, 300]
    )
    assert convert_box([1, 2, 3, 4], "unit", "unit") == [1.0, 2.0, 3.0, 4.0]
    assert convert_box([1, 2, 3], "unit", "grid1000") is None
    with pytest.raises(ValueError, match="resized_width"):
        convert_box([1, 2, 3, 4], "pixels", "unit", MediaInfo(width=10, height=10))
    with pytest.raises(ValueError, match="unknown box convention 'inches'"):
        convert_box([1, 2, 3, 4], "inches", "unit")


@pytest.mark.parametrize(
    ("pred", "truth", "strict", "inclusive"),
    [
        (100, 100, 1.0, 1.0),
        (105, 100, 0.9, 1.0),  # relative error 0.05 meets θ = 0.95 only with ≤
        (90, 100, 0.8, 0.9),  # 0.10 < 1-θ for θ ≤ 0.85 (8 of 10); ≤ adds θ = 0.90
        (70, 100, 0.4, 0.5),
        (50, 100, 0.0, 0.1),
        (10.5, 10, 0.9, 1.0),  # 0.5 / 10 is 0.05 only up to float rounding: still exactly θ = 0.95
        (13, 10, 0.4, 0.5),  # 0.3 ≤ 1-θ for θ ≤ 0.70 (5 of 10); strict drops θ = 0.70
        (25, 10, 0.0, 0.0),
        (-1, 1, 0.0, 0.0),
        (0, 0, 1.0, 1.0),
        (1, 0, 0.0, 0.0),
        (float("nan"), 1, 0.0, 0.0),
    ],
)
def test_mean_relative_accuracy(pred: float, truth: float, strict: float, inclusive: float) -> None:
    assert mean_relative_accuracy(pred, truth) == pytest.approx(strict)
    assert mean_relative_accuracy(pred, truth, inclusive=True) == pytest.approx(inclusive)


@pytest.mark.parametrize(
    ("pred", "truth", "expected"),
    [
        # VSI-Bench's official rule: abs(pred - gt) / gt <= 1 - np.linspace(0.5, 0.95, 10), in floats, where
        # 1 - θ is 0.5, 0.44999999999999996, 0.4, 0.35, 0.30000000000000004, 0.25, 0.19999999999999996,
        # 0.15000000000000002, 0.10000000000000009, 0.050000000000000044
        (12, 10, 0.6),  # error 0.2 fails θ = 0.8 (exact hundredths would say 0.7)
        (145, 100, 0.1),  # error 0.45 fails θ = 0.55 (exact: 0.2)
        (90, 100, 0.9),  # error 0.1 meets θ = 0.9
        (105, 100, 1.0),  # error 0.05 meets θ = 0.95
        (13, 10, 0.5),  # error 0.3 meets θ = 0.7
        (0, 0, 1.0),
    ],
)
def test_mean_relative_accuracy_with_the_official_float_thresholds(
    pred: float, truth: float, expected: float
) -> None:
    assert mean_relative_accuracy(pred, truth, inclusive=True, float_thresholds=True) == expected
    assert MRA_FLOAT_THRESHOLDS[6] == 0.8 and 1 - MRA_FLOAT_THRESHOLDS[6] < 0.2
