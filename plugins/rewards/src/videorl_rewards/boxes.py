"""Boxes in answers: their shapes, the coordinate convention of each model family, and conversion.

Qwen2.5-VL answers in absolute pixels of its resized input; Qwen2-VL, Qwen3-VL and Qwen3.5 on a
0–1000 grid relative to the frame (see ``shared/reference/benchmarks.md`` §4.5). Ground truths are
in the convention their dataset states (the sample's ``box_convention`` field, else the reward's
``truth_convention``). Both sides are converted to 0–1 fractions of the frame before IoU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from videorl.api import ConfigError, RewardInput, answers

#: the box convention each model family answers in
FAMILY_CONVENTIONS: dict[str, str] = {
    "qwen2_vl": "grid1000",
    "qwen2_5_vl": "pixels",
    "qwen3_vl": "grid1000",
    "qwen3_vl_moe": "grid1000",
    "qwen3_5": "grid1000",
    "qwen3_5_moe": "grid1000",
}


def check_convention(value: str, where: str) -> str:
    if value not in answers.BOX_CONVENTIONS:
        raise ConfigError(
            f"{where}: unknown box convention {value!r}; known: {', '.join(answers.BOX_CONVENTIONS)}"
        )
    return value


def box_instruction(family: str | None) -> str:
    """How a prompt asks for box coordinates for ``family`` (a template global)."""
    convention = FAMILY_CONVENTIONS.get(family or "")
    if convention == "pixels":
        return "absolute pixel coordinates of the frames as you see them"
    if convention == "grid1000":
        return "coordinates on a 0-1000 grid relative to the frame's width and height"
    return "coordinates in the convention of the question"


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def as_box(value: Any) -> list[float] | None:
    """One ``[x1, y1, x2, y2]`` box with x1 ≤ x2 and y1 ≤ y2, from a list, ``{"bbox_2d": [...]}`` or
    ``{"boxes": [...]}``, or a one-element list of those; ``None`` otherwise."""
    if isinstance(value, Mapping):
        value = value.get("bbox_2d", value.get("boxes", value.get("bbox")))
    if isinstance(value, list) and len(value) == 1:
        return as_box(value[0])
    if not isinstance(value, (list, tuple)) or len(value) != 4 or not all(_finite(v) for v in value):
        return None
    x1, y1, x2, y2 = (float(v) for v in value)
    return [x1, y1, x2, y2] if x1 <= x2 and y1 <= y2 else None


def frame_key(key: Any) -> float | None:
    """A frame key (``"3"``, ``"3.0"``, ``3``) as seconds rounded to milliseconds."""
    try:
        value = float(key)
    except (TypeError, ValueError):
        return None
    return round(value, 3) if math.isfinite(value) else None


def as_frame_boxes(value: Any) -> dict[float, list[float]] | None:
    """Boxes per frame from ``{"<sec>": box}`` or a list of ``{"time": t, "bbox_2d": box}``; ``None``
    when the shape is wrong. Malformed entries are left out."""
    out: dict[float, list[float]] = {}
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, list) and all(isinstance(v, Mapping) and "time" in v for v in value):
        items = [(v["time"], v) for v in value]
    else:
        return None
    for key, raw in items:
        second, box = frame_key(key), as_box(raw)
        if second is not None and box is not None:
            out[second] = box
    return out


class BoxConversion:
    """Converts answer and ground-truth boxes of one input to 0–1 fractions of the frame."""

    def __init__(
        self, *, truth_convention: str = "source_pixels", family_conventions: Mapping[str, str] | None = None
    ) -> None:
        self.truth_convention = check_convention(truth_convention, "truth_convention")
        self.family_conventions = dict(FAMILY_CONVENTIONS)
        for family, convention in (family_conventions or {}).items():
            self.family_conventions[family] = check_convention(convention, f"family_conventions.{family}")

    def conventions(self, inp: RewardInput) -> tuple[str, str]:
        """(answer convention, ground-truth convention) of ``inp``; a model family not in the table
        answers in the ground truth's convention."""
        truth = inp.extra.get("box_convention") or self.truth_convention
        check_convention(truth, f"sample {inp.sample_id!r}: box_convention")
        answer = self.family_conventions.get(inp.model_family or "", truth)
        return answer, truth

    def unit(self, box: list[float], convention: str, inp: RewardInput) -> list[float]:
        if convention == "unit":
            return box
        converted = answers.convert_box(box, convention, "unit", inp.media)
        assert converted is not None  # box is well-formed
        return converted
