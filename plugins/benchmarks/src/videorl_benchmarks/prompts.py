"""Prompt wording per model family: EasyVideoR1's Qwen3 and Qwen2.5 templates, reproduced word for word.

A model family (a model backend's name) picks a style: ``qwen3*`` (Qwen3-VL, Qwen3.5) → EasyVideoR1's
Qwen3 templates (thinking and non-thinking); ``qwen2*`` (Qwen2-VL, Qwen2.5-VL) → Video-R1's template
used by EasyVideoR1's ``qwen25`` family. Any other family, or none, gets the benchmark's official
prompt (each adapter's ``official_prompt``).
"""

from __future__ import annotations

from collections.abc import Sequence

from videorl.api import answers

QWEN3 = "qwen3"
QWEN25 = "qwen25"

#: EasyVideoR1 prefixes the question of a sample with an image (Video-MMMU Adaptation) with this
IMAGE_HINT = "The image for this question is at the end of the video.\n"


def prompt_style(family: str | None) -> str | None:
    """The template style of a model family, ``None`` for the official benchmark prompt."""
    if not family:
        return None
    key = family.lower().replace("-", "_").replace(".", "_")
    if key.startswith("qwen3"):
        return QWEN3
    if key.startswith(("qwen2", "qwen25")):
        return QWEN25
    return None


def evr1_question(problem: str, options: Sequence[str] | None) -> str:
    """EasyVideoR1's question text: the problem, then "Possible answer choices" with lettered options."""
    if not options:
        return problem
    lines = "".join(f"{answers.CHOICE_LETTERS[i]}. {text}\n" for i, text in enumerate(options))
    return f"{problem} Possible answer choices:\n{lines}"


_Q25_HEADER = (
    "{Question}\n"
    "Please think about this question as if you were a human pondering deeply. "
    "Engage in an internal dialogue using expressions such as 'let me think', 'wait', 'Hmm', "
    "'oh, I see', 'let's break it down', etc, or other natural language thought expressions "
    "It's encouraged to include self-reflection or verification in the reasoning process. "
    "Provide your detailed reasoning between the <think> and </think> tags, and then give your "
    "final answer between the <answer> and </answer> tags."
)
_Q25_TYPE = {
    "multiple_choice": " Please provide only the single option letter (e.g., A, B, C, D, etc.) within the "
    "<answer> </answer> tags.",
    "numerical": " Please provide the numerical value (e.g., 42 or 3.14) within the <answer> </answer> tags.",
    "regression": (
        " Please provide the numerical value (e.g., 42 or 3.14) within the <answer> </answer> tags."
    ),
    "open_ended": " Please provide your text answer within the <answer> </answer> tags.",
    "free_form": " Please provide your text answer within the <answer> </answer> tags.",
    "temporal_grounding": " Please provide the time span in seconds as JSON within the <answer>...</answer> "
    'tags. Example: <answer>{"time": [12.3, 25.7]}</answer>',
    "spatial_temporal_grounding": " Please provide the time span in seconds and bounding boxes as JSON "
    "within "
    'the <answer>...</answer> tags. Example: <answer>{"time": [8.125, 13.483], "boxes": {"9": [317, 422, '
    "582, 997]}}</answer>",
}

_Q3_MC = (
    "Select the best answer to the following multiple-choice question based on the video.\n"
    "Respond with only the letter (A, B, C, or D) of the correct option.\n"
    "Question: {Question}"
)
_Q3_MC_THINKING = (
    "You should watch and learn the video content. Then apply what you learned to select the best answer "
    "to the following multiple-choice question based on the video.\n"
    "Begin by explaining your reasoning process briefly.\n"
    'Conclude by stating the final answer using the following format: "Therefore, the final answer is: '
    '$LETTER" (without quotes), where $LETTER must be one of the options.\n'
    "Question: {Question}"
)
_Q3_OPEN = "Answer the following question based on the video.\nQuestion: {Question}"
_Q3_OPEN_THINKING = (
    "You should watch and learn the video content. Then apply what you learned to answer the following "
    "question based on the video.\n"
    "Begin by explaining your reasoning process briefly.\n"
    "Question: {Question}"
)
_TG_JSON = (
    'as JSON within the <answer>...</answer> tags.\nExample:\n<answer>{"time": [12.3, 25.7]}</answer>\n'
)
_STG_RULES = (
    "You MUST output one bounding box for every integer second within the given time span (inclusive).\n"
    "Example:\n"
    '<answer>{{"time": [{example}], "boxes": {{"9": [317, 422, 582, 997], "10": [332, 175, 442, 369], '
    '"11": [340, 180, 450, 370]}}}}</answer>\n'
    "Note: Each key in 'boxes' must be an integer second within the span, and its value must be a 4-number "
    "bounding box [x1, y1, x2, y2]."
)
_BEST = "\nThe best answer is: "
_Q3_NOTHINK_TYPE = {
    "temporal_grounding": "\nPlease provide the time span in seconds " + _TG_JSON,
    "spatial_temporal_grounding": "\nPlease provide the time span in seconds and bounding boxes as JSON "
    "within "
    "the <answer>...</answer> tags.\n" + _STG_RULES.format(example="8.125, 13.483"),
}


def _conclude(placeholder: str, where: str = "") -> str:
    return (
        "\nConclude by stating the final answer using the following format: "
        f'"Therefore, the final answer is: ${placeholder}" (without quotes){where}.'
    )


#: EasyVideoR1's thinking-mode endings per problem type (also used after official prompts)
THINK_SUFFIX = {
    "multiple_choice": _conclude("LETTER", ", where $LETTER must be one of the options"),
    "numerical": _conclude("NUMBER", ", where $NUMBER is your numerical answer"),
    "regression": _conclude("NUMBER", ", where $NUMBER is your numerical answer"),
    "counting": _conclude("NUMBER", ", where $NUMBER is your numerical answer"),
    "open_ended": _conclude("ANSWER"),
    "free_form": _conclude("ANSWER"),
    "temporal_grounding": "\nConclude by providing the time span in seconds " + _TG_JSON,
    "spatial_temporal_grounding": "\nConclude by providing the time span in seconds and bounding boxes as "
    "JSON "
    "within the <answer>...</answer> tags.\n" + _STG_RULES.format(example="8, 13"),
}

#: the reasoning request put before :data:`THINK_SUFFIX` after an official prompt
THINK_LEAD = "Begin by explaining your reasoning process briefly."


def family_prompt(
    style: str, question: str, problem_type: str, *, thinking: bool, image_hint: str = ""
) -> str:
    """EasyVideoR1's prompt for ``question`` (see :func:`evr1_question`) in ``style``.

    Problem types without a template of their own (yes/no, counting, ...) get the free-form one.
    """
    if style == QWEN25:
        suffix = _Q25_TYPE.get(problem_type, _Q25_TYPE["free_form"])
        header = _Q25_HEADER if thinking else "{Question}"
        return image_hint + header.format(Question=question) + suffix
    if problem_type == "multiple_choice":
        if thinking:
            return image_hint + _Q3_MC_THINKING.format(Question=question)
        return image_hint + _Q3_MC.format(Question=question) + _BEST
    if thinking:
        suffix = THINK_SUFFIX.get(problem_type, THINK_SUFFIX["free_form"])
        return image_hint + _Q3_OPEN_THINKING.format(Question=question) + suffix
    return image_hint + _Q3_OPEN.format(Question=question) + _Q3_NOTHINK_TYPE.get(problem_type, _BEST)


def thinking_ending(problem_type: str) -> str:
    """What an official prompt gets appended in thinking mode: a reasoning request and the answer format."""
    return THINK_LEAD + THINK_SUFFIX.get(problem_type, THINK_SUFFIX["free_form"])
