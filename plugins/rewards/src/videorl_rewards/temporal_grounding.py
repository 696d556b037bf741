"""Temporal grounding: the 1-D IoU of the answered ``[start, end]`` (seconds) with the ground truth."""

from __future__ import annotations

from typing import Any

from videorl.api import RewardInput, TaskReward, answers


def valid_interval(value: Any) -> list[float] | None:
    """``[start, end]`` when ``value`` holds a finite, ordered interval, else ``None``."""
    span = answers.parse_interval(value)
    return span if span is not None and span[0] <= span[1] else None


class TemporalGroundingReward(TaskReward):
    """Accuracy = tIoU = overlap / span of the two intervals.

    Answers: ``{"time": [s, e]}``, ``[s, e]``, or text such as "from 2.5 to 7 seconds" or
    "00:12 - 00:25". A reversed, NaN or infinite interval does not fit the type (accuracy 0).
    """

    name = "temporal_grounding"

    def parse_answer(self, text: Any, inp: RewardInput) -> list[float] | None:
        return valid_interval(text)

    def accuracy(self, answer: list[float], truth: list[float], inp: RewardInput) -> float:
        return answers.interval_iou(answer, truth)
