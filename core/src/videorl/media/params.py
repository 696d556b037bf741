"""Decoding budgets: how many frames to sample and how large each may be.

The size ``factor`` (patch size × spatial merge: 28 for Qwen2/2.5-VL, 32 for Qwen3-VL/3.5) and the
``temporal_patch_size`` come from the model backend; nothing in core assumes a value for them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol

from videorl.errors import ConfigError

INTERPOLATIONS = ("bicubic", "bilinear", "area", "lanczos")
#: The fields of a time range; absent from the canonical form when unset, so keys without one are unchanged.
RANGE_FIELDS = ("start", "end")


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise ConfigError(what)


@dataclass(frozen=True)
class VisualBudget:
    """Pixel and frame budgets, independent for images and videos.

    ``*_pixels`` are per image or per frame; ``video_total_pixels`` (optional) caps the pixels of all
    frames of one video together. The data path resizes to these budgets with the backend's
    :attr:`ModelBackend.factor`; a backend never resizes again. ``DecodeParams.from_budget`` and
    ``ImageParams.from_budget`` are the one conversion to the data path's parameters.
    """

    image_min_pixels: int
    image_max_pixels: int
    video_min_pixels: int
    video_max_pixels: int
    video_total_pixels: int | None = None
    video_max_frames: int = 128
    video_fps: float = 2.0

    def __post_init__(self) -> None:
        for kind in ("image", "video"):
            lo, hi = getattr(self, f"{kind}_min_pixels"), getattr(self, f"{kind}_max_pixels")
            if not 0 < lo <= hi:
                raise ConfigError(
                    f"{kind}_min_pixels ({lo}) must be positive and at most {kind}_max_pixels ({hi})"
                )
        if self.video_total_pixels is not None and self.video_total_pixels < self.video_min_pixels:
            raise ConfigError(
                f"video_total_pixels ({self.video_total_pixels}) is below video_min_pixels "
                f"({self.video_min_pixels}): not even one frame fits"
            )
        if self.video_max_frames < 1 or self.video_fps <= 0:
            raise ConfigError(
                f"video_max_frames ({self.video_max_frames}) must be >= 1 and video_fps "
                f"({self.video_fps}) > 0"
            )

    @classmethod
    def for_factor(cls, factor: int, **overrides: Any) -> VisualBudget:
        """The default budget for a patch×merge ``factor`` (the seed's recipe), with ``overrides``."""
        values: dict[str, Any] = {
            "image_min_pixels": 4 * factor * factor,
            "image_max_pixels": 1_048_576,
            "video_min_pixels": 4 * factor * factor,
            "video_max_pixels": 262_144,
        }
        values.update(overrides)
        return cls(**values)


class PatchGeometry(Protocol):
    """The patch geometry of a model family (a :class:`~videorl.backend.ModelBackend` has it): frames are
    resized to multiples of ``factor`` pixels and sampled in multiples of ``temporal_patch_size``."""

    @property
    def factor(self) -> int: ...

    @property
    def temporal_patch_size(self) -> int: ...


@dataclass(frozen=True, kw_only=True)
class DecodeParams:
    """How a video is turned into frames; every field is part of the cache key.

    ``fps`` is the target sampling rate, ``min_frames``/``max_frames`` bound the count, which is then
    rounded down to a multiple of ``temporal_patch_size``. Each frame is resized to at most
    ``max_pixels`` and at least ``min_pixels`` with height and width multiples of ``factor``.
    ``total_pixels``, when set, caps the pixels of the whole clip counted per temporal patch (as in
    qwen-vl-utils): each frame gets at most ``total_pixels * temporal_patch_size / T``.
    ``start``/``end``, when set, restrict sampling to that time range (seconds from the stream's first
    frame; ``end`` past the video means its end): the count then follows the range's duration.
    """

    factor: int
    temporal_patch_size: int
    fps: float = 2.0
    max_frames: int = 128
    min_frames: int = 4
    min_pixels: int = 3136
    max_pixels: int = 262144
    total_pixels: int | None = None
    interpolation: str = "bicubic"
    start: float | None = None
    end: float | None = None

    def __post_init__(self) -> None:
        _check(self.factor >= 1, f"factor must be a positive integer, got {self.factor}")
        _check(
            self.temporal_patch_size >= 1, f"temporal_patch_size must be >= 1, got {self.temporal_patch_size}"
        )
        _check(self.fps > 0, f"fps must be positive, got {self.fps}")
        _check(
            self.max_frames >= self.temporal_patch_size,
            f"max_frames ({self.max_frames}) must be at least temporal_patch_size "
            f"({self.temporal_patch_size})",
        )
        _check(self.min_frames >= 1, f"min_frames must be >= 1, got {self.min_frames}")
        _check(
            0 <= self.min_pixels <= self.max_pixels,
            f"need 0 <= min_pixels ({self.min_pixels}) <= max_pixels ({self.max_pixels})",
        )
        _check(
            self.max_pixels >= self.factor**2,
            f"max_pixels ({self.max_pixels}) is below one patch ({self.factor}²)",
        )
        _check(
            self.total_pixels is None or self.total_pixels > 0,
            f"total_pixels must be positive, got {self.total_pixels}",
        )
        _check(
            self.interpolation in INTERPOLATIONS,
            f"interpolation must be one of {INTERPOLATIONS}, got {self.interpolation!r}",
        )
        _check(self.start is None or self.start >= 0, f"start must be >= 0 seconds, got {self.start}")
        _check(
            self.end is None or self.end > (self.start or 0),
            f"end ({self.end} s) must be after start ({self.start or 0} s)",
        )

    @property
    def has_range(self) -> bool:
        """Whether a time range (``start`` or ``end``) is set."""
        return self.start is not None or self.end is not None

    def to_dict(self) -> dict[str, Any]:
        """The fields, without ``start``/``end`` when unset (the form of parameters before time ranges)."""
        return {k: v for k, v in asdict(self).items() if not (k in RANGE_FIELDS and v is None)}

    def to_json(self) -> str:
        """Canonical JSON (sorted keys; ``fps`` and a range's bounds as floats): the form hashed into
        cache keys. Parameters without a range give the same JSON as before ranges existed."""
        d = self.to_dict()
        for name in ("fps", *RANGE_FIELDS):
            if name in d:
                d[name] = float(d[name])
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DecodeParams:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown decode parameters {unknown}; known: {sorted(known)}")
        return cls(**d)

    @classmethod
    def from_budget(
        cls, budget: VisualBudget, *, factor: int, temporal_patch_size: int, **overrides: Any
    ) -> DecodeParams:
        """From a :class:`videorl.backend.VisualBudget` (its ``video_*`` fields) and a backend's geometry:
        the one conversion from a budget (training's encoder, evaluation, ``cache build``)."""
        values: dict[str, Any] = {
            "fps": budget.video_fps,
            "max_frames": budget.video_max_frames,
            "min_pixels": budget.video_min_pixels,
            "max_pixels": budget.video_max_pixels,
            "total_pixels": budget.video_total_pixels,
        }
        return cls(factor=factor, temporal_patch_size=temporal_patch_size, **{**values, **overrides})

    def differences(self, other: DecodeParams) -> dict[str, tuple[Any, Any]]:
        """``{name: (self's value, other's value)}`` for every field that differs."""
        a, b = asdict(self), asdict(other)
        return {k: (a[k], b[k]) for k in a if a[k] != b[k]}


@dataclass(frozen=True, kw_only=True)
class ImageParams:
    """The pixel budget of an image, independent of the video budget."""

    factor: int
    min_pixels: int = 3136
    max_pixels: int = 1048576
    interpolation: str = "bicubic"

    def __post_init__(self) -> None:
        _check(self.factor >= 1, f"factor must be a positive integer, got {self.factor}")
        _check(
            0 <= self.min_pixels <= self.max_pixels,
            f"need 0 <= image min_pixels ({self.min_pixels}) <= max_pixels ({self.max_pixels})",
        )
        _check(
            self.max_pixels >= self.factor**2,
            f"image max_pixels ({self.max_pixels}) is below one patch ({self.factor}²)",
        )
        _check(
            self.interpolation in INTERPOLATIONS,
            f"interpolation must be one of {INTERPOLATIONS}, got {self.interpolation!r}",
        )

    @classmethod
    def from_budget(cls, budget: VisualBudget, *, factor: int, **overrides: Any) -> ImageParams:
        """From a :class:`videorl.backend.VisualBudget` (its ``image_*`` fields) and a backend's factor."""
        values = {"min_pixels": budget.image_min_pixels, "max_pixels": budget.image_max_pixels}
        return cls(factor=factor, **{**values, **overrides})
