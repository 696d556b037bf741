"""Spatial grounding: the IoU of the answered box with the ground truth's, in a common convention."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from videorl.api import RewardInput, TaskReward, answers
from videorl_rewards.boxes import BoxConversion, as_box


class SpatialGroundingReward(TaskReward):
    """Accuracy = box IoU, after converting both boxes to fractions of the frame.

    Answers: ``{"boxes": [x1, y1, x2, y2]}``, ``[x1, y1, x2, y2]`` or Qwen's
    ``[{"bbox_2d": [...], "label": ...}]`` (exactly one box). The answer is read in the model family's
    convention (pixels of the resized input for Qwen2.5-VL, a 0–1000 grid for Qwen2-VL/Qwen3-VL/Qwen3.5,
    overridable with ``family_conventions``), the ground truth in the sample's ``box_convention`` or
    ``truth_convention`` (default ``source_pixels``). Pixel conventions need the sample's media size.
    """

    name = "spatial_grounding"

    def __init__(
        self,
        *,
        truth_convention: str = "source_pixels",
        family_conventions: Mapping[str, str] | None = None,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self.boxes = BoxConversion(truth_convention=truth_convention, family_conventions=family_conventions)

    def parse_answer(self, text: Any, inp: RewardInput) -> list[float] | None:
        return as_box(answers.parse_json_answer(text) if isinstance(text, str) else text)

    def accuracy(self, answer: list[float], truth: list[float], inp: RewardInput) -> float:
        answer_convention, truth_convention = self.boxes.conventions(inp)
        if answer_convention == truth_convention:
            return answers.box_iou(answer, truth)
        return answers.box_iou(
            self.boxes.unit(answer, answer_convention, inp), self.boxes.unit(truth, truth_convention, inp)
        )
