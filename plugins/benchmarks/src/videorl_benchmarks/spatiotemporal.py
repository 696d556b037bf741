"""EasyVideoR1's spatio-temporal grounding protocol (STVG): the answer's shape and its score.

Benchmark-specific on purpose: the box term averages over the seconds present in **both** answer and
truth (the official metric, which the rewards deliberately do not copy), and seconds are kept as
integer strings so that a prediction read back from JSON still matches the truth's keys.
"""

from __future__ import annotations

import math
from typing import Any

from videorl.api import answers, mean


def _second_key(key: Any) -> str | None:
    try:
        value = float(key)
    except (TypeError, ValueError):
        return None
    return str(int(value)) if math.isfinite(value) else None


def parse_st_answer(text: str | None) -> dict[str, Any] | None:
    """``{"time": [s, e] | None, "boxes": {"<second>": [x1, y1, x2, y2]}}`` from a JSON answer (prose
    around it allowed; a reversed span is swapped), or ``None`` when it has neither a span nor a box."""
    value = answers.parse_json_answer(text)
    if not isinstance(value, dict):
        return None
    span = answers.parse_interval(value.get("time"), sort=True)
    boxes: dict[str, list[float]] = {}
    raw = value.get("boxes")
    if isinstance(raw, dict):
        for key, box in raw.items():
            second = _second_key(key)
            if second is not None and isinstance(box, list) and len(box) == 4:
                try:
                    boxes[second] = [float(v) for v in box]
                except (TypeError, ValueError):
                    continue
    if span is None and not boxes:
        return None
    return {"time": span, "boxes": boxes}


def st_score(prediction: Any, truth: Any) -> float:
    """EasyVideoR1's STVG score: 0.5 · tIoU + 0.5 · mean box IoU over the seconds present in both
    (tIoU alone when the truth has no boxes)."""
    if not isinstance(prediction, dict) or not isinstance(truth, dict):
        return 0.0
    tiou = answers.interval_iou(prediction.get("time"), truth.get("time"))
    truth_boxes = truth.get("boxes") or {}
    if not truth_boxes:
        return tiou
    pred_boxes = prediction.get("boxes") or {}
    common = [k for k in pred_boxes if k in truth_boxes]
    miou = mean(answers.box_iou(pred_boxes[k], truth_boxes[k]) for k in common)
    return 0.5 * tiou + 0.5 * miou
