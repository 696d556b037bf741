"""Scores of located and measured answers: interval and box IoU, box conventions, relative accuracy."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from videorl.answers.values import finite_numbers

if TYPE_CHECKING:
    from videorl.media.info import MediaInfo


def interval_iou(pred: Any, truth: Any) -> float:
    """1-D IoU of two ``[start, end]`` intervals; 0 when either is malformed, reversed, NaN or empty."""
    a, b = finite_numbers(pred, 2), finite_numbers(truth, 2)
    if a is None or b is None or a[0] > a[1] or b[0] > b[1]:
        return 0.0
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = max(a[1], b[1]) - min(a[0], b[0])
    return inter / union if union > 1e-12 else 0.0


def box_iou(pred: Any, truth: Any) -> float:
    """IoU of two ``[x1, y1, x2, y2]`` boxes; 0 when either is malformed, reversed, NaN or empty."""
    a, b = finite_numbers(pred, 4), finite_numbers(truth, 4)
    if a is None or b is None or a[0] > a[2] or a[1] > a[3] or b[0] > b[2] or b[1] > b[3]:
        return 0.0
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 1e-12 else 0.0


#: box coordinate conventions: 0–1 fractions, a 0–1000 grid, pixels of the resized model input,
#: pixels of the source video
BOX_CONVENTIONS = ("unit", "grid1000", "pixels", "source_pixels")


def convert_box(box: Any, source: str, target: str, media: MediaInfo | None = None) -> list[float] | None:
    """``box`` converted from convention ``source`` to ``target`` (see :data:`BOX_CONVENTIONS`).

    Pixel conventions need the frame size from ``media`` (``resized_width/height`` for ``"pixels"``,
    ``width/height`` for ``"source_pixels"``); a missing size raises ``ValueError`` naming it. A
    malformed box gives ``None``.
    """
    values = finite_numbers(box, 4)
    if values is None:
        return None
    if source == target:
        return values
    sx, sy = _scale(source, media)
    tx, ty = _scale(target, media)
    return [values[0] * tx / sx, values[1] * ty / sy, values[2] * tx / sx, values[3] * ty / sy]


def _scale(convention: str, media: MediaInfo | None) -> tuple[float, float]:
    """Units of ``convention`` per unit fraction of the frame."""
    if convention == "unit":
        return 1.0, 1.0
    if convention == "grid1000":
        return 1000.0, 1000.0
    if convention == "pixels":
        w = media.resized_width if media else None
        h = media.resized_height if media else None
        what = "resized_width/resized_height"
    elif convention == "source_pixels":
        w = media.width if media else None
        h = media.height if media else None
        what = "width/height"
    else:
        raise ValueError(f"unknown box convention {convention!r}; known: {', '.join(BOX_CONVENTIONS)}")
    if not w or not h:
        raise ValueError(
            f"box convention {convention!r} needs the media's {what}, which the sample does not carry; "
            "give the sample its media metadata or state the boxes in 'unit' or 'grid1000'"
        )
    return float(w), float(h)


#: the MRA thresholds θ = 0.50, 0.55, …, 0.95, as hundredths (exact)
MRA_THRESHOLDS = tuple(range(50, 100, 5))
#: the same θ as VSI-Bench's official code makes them, ``numpy.linspace(0.5, 0.95, 10)``: 0.5 + i · 0.45 / 9,
#: the last exactly 0.95 (so 1 − θ is 0.19999999999999996 at θ = 0.8, 0.10000000000000009 at θ = 0.9)
MRA_FLOAT_THRESHOLDS = (*(0.5 + i * ((0.95 - 0.5) / 9) for i in range(9)), 0.95)


def mean_relative_accuracy(
    pred: float, truth: float, *, inclusive: bool = False, float_thresholds: bool = False
) -> float:
    """MRA: the fraction of θ ∈ {0.50, 0.55, …, 0.95} with ``|pred − truth| / |truth| < 1 − θ``.

    Strict ``<`` by default (EasyVideoR1); ``inclusive=True`` uses ``≤`` (VSI-Bench's official code,
    lmms-eval). By default the comparison is made in exact hundredths, so a relative error of exactly 0.05
    meets θ = 0.95 only when inclusive. ``float_thresholds=True`` compares in floating point against
    :data:`MRA_FLOAT_THRESHOLDS`, as VSI-Bench's official code does: inclusive, a relative error of exactly
    0.2 then fails θ = 0.8 (0.2 > 1 − 0.8 in floats) while 0.1 meets θ = 0.9. ``truth == 0`` counts only an
    exact ``0`` prediction. Non-finite inputs give 0.
    """
    if not (math.isfinite(pred) and math.isfinite(truth)):
        return 0.0
    if truth == 0:
        return 1.0 if pred == 0 else 0.0
    if float_thresholds:
        error = abs(pred - truth) / abs(truth)
        hits = sum((error <= 1 - t) if inclusive else (error < 1 - t) for t in MRA_FLOAT_THRESHOLDS)
        return hits / len(MRA_FLOAT_THRESHOLDS)
    rel = round(abs(pred - truth) / abs(truth) * 100, 9)
    hits = sum((rel <= 100 - t) if inclusive else (rel < 100 - t) for t in MRA_THRESHOLDS)
    return hits / len(MRA_THRESHOLDS)
