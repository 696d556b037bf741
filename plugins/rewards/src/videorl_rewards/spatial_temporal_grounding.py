"""Spatial-temporal grounding: 0.5·tIoU + 0.5·(mean box IoU over all ground-truth frames)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from videorl.api import RewardInput, TaskReward, answers
from videorl_rewards.boxes import BoxConversion, as_frame_boxes
from videorl_rewards.temporal_grounding import valid_interval
from videorl_rewards.tracking import mean_frame_iou


class SpatialTemporalGroundingReward(TaskReward):
    """Accuracy = 0.5·tIoU + 0.5·mIoU, where mIoU averages over every ground-truth frame (a missing
    frame counts 0, so one correct box cannot earn full marks). A ground truth without boxes scores
    tIoU alone.

    Answers: ``{"time": [s, e], "boxes": {"<second>": [x1, y1, x2, y2], ...}}`` (``boxes`` may be empty
    or absent). Parts: ``tiou`` and ``miou``. Box conventions as for spatial grounding.
    """

    name = "spatial_temporal_grounding"

    def __init__(
        self,
        *,
        truth_convention: str = "source_pixels",
        family_conventions: Mapping[str, str] | None = None,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self.boxes = BoxConversion(truth_convention=truth_convention, family_conventions=family_conventions)

    def parse_answer(self, text: Any, inp: RewardInput) -> dict[str, Any] | None:
        value = answers.parse_json_answer(text) if isinstance(text, str) else text
        if not isinstance(value, Mapping):
            return None
        span = valid_interval(value.get("time"))
        frames = as_frame_boxes(value.get("boxes", {}))
        if span is None or frames is None:
            return None
        return {"time": span, "boxes": frames}

    def accuracy(self, answer: dict[str, Any], truth: dict[str, Any], inp: RewardInput) -> dict[str, float]:
        tiou = answers.interval_iou(answer["time"], truth["time"])
        if not truth["boxes"]:
            return {"accuracy": tiou, "tiou": tiou}
        miou = mean_frame_iou(answer["boxes"], truth["boxes"], self.boxes, inp)
        return {"accuracy": 0.5 * tiou + 0.5 * miou, "tiou": tiou, "miou": miou}
