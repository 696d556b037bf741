"""The EasyVideoR1 templates, word for word, and the family → style mapping."""

from __future__ import annotations

import pytest

from videorl_benchmarks.prompts import QWEN3, QWEN25, evr1_question, family_prompt, prompt_style


@pytest.mark.parametrize(
    ("family", "style"),
    [
        ("qwen3_vl", QWEN3),
        ("qwen3_5_moe", QWEN3),
        ("Qwen3-VL", QWEN3),
        ("qwen2_5_vl", QWEN25),
        ("qwen2_vl", QWEN25),
        (None, None),
        ("smolvlm", None),
    ],
)
def test_prompt_style(family: str | None, style: str | None) -> None:
    assert prompt_style(family) == style


def test_qwen3_multiple_choice_templates() -> None:
    question = evr1_question("What colour?", ["red", "blue"])
    assert question == "What colour? Possible answer choices:\nA. red\nB. blue\n"
    assert family_prompt(QWEN3, question, "multiple_choice", thinking=False) == (
        "Select the best answer to the following multiple-choice question based on the video.\n"
        "Respond with only the letter (A, B, C, or D) of the correct option.\n"
        "Question: What colour? Possible answer choices:\nA. red\nB. blue\n\nThe best answer is: "
    )
    thinking = family_prompt(QWEN3, question, "multiple_choice", thinking=True, image_hint="HINT\n")
    assert thinking.startswith("HINT\nYou should watch and learn the video content.")
    assert thinking.endswith(
        '"Therefore, the final answer is: $LETTER" (without quotes), where $LETTER must be one of the '
        "options.\n"
        "Question: What colour? Possible answer choices:\nA. red\nB. blue\n"
    )


def test_qwen3_open_and_grounding_templates() -> None:
    assert family_prompt(QWEN3, "How many?", "regression", thinking=False) == (
        "Answer the following question based on the video.\nQuestion: How many?\nThe best answer is: "
    )
    assert family_prompt(QWEN3, "How many?", "numerical", thinking=True).endswith(
        'Question: How many?\nConclude by stating the final answer using the following format: "Therefore, '
        'the final answer is: $NUMBER" (without quotes), where $NUMBER is your numerical answer.'
    )
    grounding = family_prompt(QWEN3, "a man sits.", "temporal_grounding", thinking=False)
    assert grounding.endswith(
        "Question: a man sits.\nPlease provide the time span in seconds as JSON within the "
        "<answer>...</answer> "
        'tags.\nExample:\n<answer>{"time": [12.3, 25.7]}</answer>\n'
    )
    stvg = family_prompt(QWEN3, "Where?", "spatial_temporal_grounding", thinking=True)
    assert '<answer>{"time": [8, 13], "boxes": {"9": [317, 422, 582, 997], "10"' in stvg
    # a type without a template of its own gets the free-form one
    assert family_prompt(QWEN3, "Is it?", "yes_no", thinking=False).endswith("\nThe best answer is: ")


def test_qwen25_templates() -> None:
    thinking = family_prompt(QWEN25, "Q", "multiple_choice", thinking=True)
    assert thinking.startswith("Q\nPlease think about this question as if you were a human pondering deeply.")
    assert thinking.endswith(
        "final answer between the <answer> and </answer> tags. Please provide only the single option letter "
        "(e.g., A, B, C, D, etc.) within the <answer> </answer> tags."
    )
    assert family_prompt(QWEN25, "Q", "regression", thinking=False) == (
        "Q Please provide the numerical value (e.g., 42 or 3.14) within the <answer> </answer> tags."
    )
