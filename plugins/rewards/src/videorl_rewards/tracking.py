"""Tracking: the mean box IoU over **all** ground-truth frames; a frame the answer misses counts 0."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from videorl.api import RewardInput, TaskReward, answers
from videorl_rewards.boxes import BoxConversion, as_frame_boxes


def mean_frame_iou(
    answer: dict[float, list[float]], truth: dict[float, list[float]], boxes: BoxConversion, inp: RewardInput
) -> float:
    """Σ over ground-truth frames of IoU(answer box, truth box) / number of ground-truth frames.

    Averaging over the ground truth's frames (OneThinker), not over the frames both share
    (EasyVideoR1), so that one correct box cannot earn full marks.
    """
    if not truth:
        return 0.0
    answer_convention, truth_convention = boxes.conventions(inp)
    total = 0.0
    for second, truth_box in truth.items():
        box = answer.get(second)
        if box is None:
            continue
        if answer_convention != truth_convention:
            box = boxes.unit(box, answer_convention, inp)
            truth_box = boxes.unit(truth_box, truth_convention, inp)
        total += answers.box_iou(box, truth_box)
    return total / len(truth)


class TrackingReward(TaskReward):
    """Accuracy = mean IoU over the ground truth's frames (missing frames 0).

    Answers: ``{"boxes": {"<second>": [x1, y1, x2, y2], ...}}`` or a list of ``{"time": t, "bbox_2d":
    [...]}``. Frame keys are compared as numbers (``"3"`` = ``"3.0"``). Box conventions as for spatial
    grounding.
    """

    name = "tracking"

    def __init__(
        self,
        *,
        truth_convention: str = "source_pixels",
        family_conventions: Mapping[str, str] | None = None,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self.boxes = BoxConversion(truth_convention=truth_convention, family_conventions=family_conventions)

    def parse_answer(self, text: Any, inp: RewardInput) -> dict[float, list[float]] | None:
        value = answers.parse_json_answer(text) if isinstance(text, str) else text
        if isinstance(value, Mapping) and "boxes" in value:
            value = value["boxes"]
        frames = as_frame_boxes(value)
        return frames or None

    def accuracy(
        self, answer: dict[float, list[float]], truth: dict[float, list[float]], inp: RewardInput
    ) -> float:
        return mean_frame_iou(answer, truth, self.boxes, inp)
