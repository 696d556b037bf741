"""Hook implementations of videorl-rewards. Targets are lazy: nothing heavy is imported here."""

from __future__ import annotations

from pathlib import Path

from videorl.api import Register, hookimpl

TEMPLATES = Path(__file__).with_name("templates")

#: (name, lazy target, further problem_type spellings, description)
REWARDS: list[tuple[str, str, list[str], str]] = [
    ("multiple_choice", "videorl_rewards.multiple_choice:MultipleChoiceReward", ["multiple choice", "mc"],
     "option letter (letters, \\boxed{}, option text) equals the ground truth's"),
    ("numerical", "videorl_rewards.numerical:NumericalReward", ["number", "numeric"],
     "one number within a relative or absolute tolerance"),
    ("regression", "videorl_rewards.regression:RegressionReward", [],
     "mean relative accuracy over thresholds 0.50..0.95"),
    ("temporal_grounding", "videorl_rewards.temporal_grounding:TemporalGroundingReward", [],
     "1-D IoU of [start, end] seconds"),
    ("spatial_grounding", "videorl_rewards.spatial_grounding:SpatialGroundingReward", [],
     "box IoU in the model family's coordinate convention"),
    ("spatial_temporal_grounding",
     "videorl_rewards.spatial_temporal_grounding:SpatialTemporalGroundingReward",
     ["spatio-temporal grounding", "stvg"], "0.5 tIoU + 0.5 mean box IoU over all ground-truth frames"),
    ("tracking", "videorl_rewards.tracking:TrackingReward", [],
     "mean box IoU over all ground-truth frames (missing = 0)"),
    ("open_ended", "videorl_rewards.open_ended:OpenEndedReward",
     ["free-form", "video qa", "video description"], "mean ROUGE-1/2/L F1"),
    ("math", "videorl_rewards.mathematics:MathReward", ["mathematics"],
     "math-verify equivalence in killable worker processes"),
    ("ocr", "videorl_rewards.ocr:OCRReward", [], "1 - word error rate, clipped"),
    ("boolean", "videorl_rewards.boolean:BooleanReward", ["binary classification"],
     "yes/no/true/false polarity"),
    ("code", "videorl_rewards.python_code:CodeReward", ["coding", "python"],
     "Python program run against the sample's tests in a sandbox"),
    ("svg_code", "videorl_rewards.markup:SVGReward", ["svg"], "SVG compared structurally"),
    ("html_code", "videorl_rewards.markup:HTMLReward", ["html"], "HTML compared structurally"),
    ("critic", "videorl_rewards.critic:CriticReward", ["llava", "preference"],
     "LLM judge over an OpenAI-compatible endpoint, or preference-label match"),
]  # fmt: skip


@hookimpl
def register_rewards(register: Register) -> None:
    for name, target, aliases, description in REWARDS:
        register(name, target, aliases=aliases, description=description)


@hookimpl
def register_prompt_templates(register: Register) -> None:
    from videorl.api import register_template_dir
    from videorl_rewards.boxes import box_instruction

    aliases = {name: spellings for name, _, spellings, _ in REWARDS}
    register_template_dir(register, TEMPLATES, globals={"box_instruction": box_instruction}, aliases=aliases)
