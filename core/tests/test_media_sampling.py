"""Frame counts, frame choice and frame sizes, against hand-computed values."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from videorl.errors import ConfigError, DataError
from videorl.media import DecodeParams, fit_to_budget, frames_in_range, nearest_frames, num_frames
from videorl.media.sizing import frame_pixel_cap

P = DecodeParams(factor=28, temporal_patch_size=2, fps=2.0, max_frames=128, min_frames=4)


@pytest.mark.parametrize(
    ("total", "duration", "params", "expected"),
    [
        (60, 2.0, P, 4),  # 2 s × 2 fps
        (1800, 60.0, P, 120),  # 60 s × 2 fps
        (108_000, 3600.0, P, 128),  # capped by max_frames
        (219, 7.3, P, 14),  # 14.6 rounded down to the temporal patch
        (5, 5.0, P, 4),  # no more than the video holds (5), rounded down to 4
        (1, 1 / 30, P, 2),  # one frame still makes one temporal patch (repeated)
        (30, 1.0, P, 4),  # min_frames
        (108_000, 3600.0, DecodeParams(factor=28, temporal_patch_size=2, max_frames=127), 126),
        (75, 2.5, DecodeParams(factor=28, temporal_patch_size=1, fps=2.0), 5),  # tps 1: no rounding
        (30, 1.0, DecodeParams(factor=28, temporal_patch_size=2, min_frames=3), 4),  # min rounded up
    ],
)
def test_num_frames(total: int, duration: float, params: DecodeParams, expected: int) -> None:
    assert num_frames(total, duration, params) == expected


@pytest.mark.parametrize(
    ("pts", "n", "expected"),
    [
        (np.arange(60) * 512, 4, [0, 20, 39, 59]),  # linspace(0, 59, 4) = 0, 19.67, 39.33, 59
        (np.arange(60), 3, [0, 29, 59]),  # 29.5 is a tie: the earlier frame
        (np.arange(300), 8, [0, 43, 85, 128, 171, 214, 256, 299]),
        # variable rate: ten frames 0.1 s apart, then one per second; targets 0, 1.33, 2.67, 4 s
        (
            np.array([0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 2000, 3000, 4000]),
            4,
            [0, 10, 12, 13],
        ),
        (np.array([7]), 2, [0, 0]),  # fewer frames than samples: repeated
        (np.array([0, 10, 20]), 2, [0, 2]),
        (np.array([5, 6, 7]), 1, [0]),
    ],
)
def test_nearest_frames(pts: np.ndarray, n: int, expected: list[int]) -> None:
    assert nearest_frames(pts, n).tolist() == expected


@pytest.mark.parametrize(
    ("pts", "time_base", "start", "end", "expected"),
    [
        # 30 fps (512 ticks a frame): [1.0, 1.5) s shows frames 30..44
        (np.arange(60) * 512, Fraction(1, 15360), 1.0, 1.5, (30, 45)),
        # between frames: frame 30 is on screen at 1.01 s, frame 45 (1.5 s) begins before 1.51 s
        (np.arange(60) * 512, Fraction(1, 15360), 1.01, 1.51, (30, 46)),
        (np.arange(60) * 512, Fraction(1, 15360), 1.0, None, (30, 60)),  # to the end of the video
        (
            np.arange(20),
            Fraction(1, 10),
            0.0,
            0.1,
            (0, 1),
        ),  # 0.1 is 1/10 s, not its binary value: frame 1 is out
        (1000 + np.arange(10) * 100, Fraction(1, 1000), 0.25, 0.5, (2, 5)),  # seconds from the first frame
        (np.arange(10), Fraction(1, 1), 9.5, 20.0, (9, 10)),  # within the last frame
    ],
)
def test_frames_in_range(
    pts: np.ndarray, time_base: Fraction, start: float, end: float | None, expected: tuple[int, int]
) -> None:
    assert frames_in_range(pts, time_base, start, end) == expected


@pytest.mark.parametrize(
    ("size", "factor", "min_pixels", "max_pixels", "expected"),
    [
        ((240, 320), 28, 3136, 262144, (252, 308)),  # round(8.57)=9, round(11.43)=11
        ((720, 1280), 28, 3136, 262144, (364, 672)),  # beta 1.875: floor(384/28)=13, floor(682.7/28)=24
        ((720, 1280), 32, 4096, 262144, (384, 672)),  # 384/32=12, floor(682.7/32)=21
        ((56, 56), 28, 50176, 262144, (224, 224)),  # upscaled to the minimum: beta 4
        ((70, 98), 28, 0, 262144, (56, 112)),  # 2.5 and 3.5 round to even: 2 and 4
        ((10, 10), 28, 0, 262144, (28, 28)),  # never below one factor
        ((1080, 1920), 32, 4096, 4096, (32, 64)),  # beta 22.5: floor(48/32)=1, floor(85.3/32)=2
    ],
)
def test_fit_to_budget(
    size: tuple[int, int], factor: int, min_pixels: int, max_pixels: int, expected: tuple[int, int]
) -> None:
    h, w = fit_to_budget(*size, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
    assert (h, w) == expected
    assert h % factor == 0 and w % factor == 0


def test_fit_to_budget_refuses_extreme_aspect_ratio() -> None:
    with pytest.raises(DataError, match="aspect ratio"):
        fit_to_budget(10, 2010, factor=28, min_pixels=0, max_pixels=262144)


def test_max_pixels_is_a_bound_at_extreme_aspect_ratios() -> None:
    """16×2000 at 12,544 px: qwen-vl-utils gives 28×1232 = 34,496 px; the short side stays one factor and
    the long side is cut to fit (12,544 / 28 = 448)."""
    assert fit_to_budget(16, 2000, factor=28, min_pixels=3136, max_pixels=12544) == (28, 448)
    assert fit_to_budget(2000, 16, factor=28, min_pixels=3136, max_pixels=12544) == (448, 28)
    for factor in (28, 32):
        for max_pixels in (4 * factor * factor, 12544, 50176, 262144):
            for height in (1, 7, 16, 40, 111, 500):
                for width in (height, 3 * height, 50 * height, 199 * height):
                    if width / height > 200 or width > 8000:
                        continue
                    h, w = fit_to_budget(height, width, factor=factor, min_pixels=0, max_pixels=max_pixels)
                    assert h * w <= max_pixels, (height, width, factor, max_pixels, h, w)


def test_a_video_of_extreme_aspect_ratio_is_an_error_naming_the_file(make_clip: Any) -> None:
    from videorl.media import MediaError, decode_video

    clip = make_clip("strip.mp4", frames=4, height=16, width=3400)
    with pytest.raises(MediaError, match=rf"^{clip}: frame size 3400x16 has an aspect ratio above 200"):
        decode_video(clip, DecodeParams(factor=28, temporal_patch_size=2))


def test_total_pixels_is_shared_by_the_frames() -> None:
    kw = {"min_pixels": 3136, "max_pixels": 262144, "temporal_patch_size": 2}
    assert frame_pixel_cap(8, total_pixels=1_000_000, **kw) == 250_000
    assert frame_pixel_cap(128, total_pixels=1_000_000, **kw) == 15_625
    assert frame_pixel_cap(128, total_pixels=100_000, **kw) == 3136  # never below min_pixels
    assert frame_pixel_cap(2, total_pixels=10**9, **kw) == 262144  # never above max_pixels
    assert frame_pixel_cap(8, total_pixels=None, **kw) == 262144


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"factor": 0}, "factor"),
        ({"fps": 0}, "fps"),
        ({"max_frames": 1}, "max_frames"),
        ({"min_pixels": 10, "max_pixels": 5}, "min_pixels"),
        ({"total_pixels": 0}, "total_pixels"),
        ({"interpolation": "nearest"}, "interpolation"),
        ({"start": -1.0}, r"start must be >= 0 seconds, got -1\.0"),
        ({"start": 3.0, "end": 2.0}, r"end \(2\.0 s\) must be after start \(3\.0 s\)"),
        ({"end": 0.0}, r"end \(0\.0 s\) must be after start \(0 s\)"),
    ],
)
def test_decode_params_are_validated(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        DecodeParams(**{"factor": 28, "temporal_patch_size": 2, **kwargs})  # type: ignore[arg-type]


def test_decode_params_need_the_backend_geometry() -> None:
    with pytest.raises(TypeError):
        DecodeParams()  # type: ignore[call-arg]
    a = DecodeParams(factor=28, temporal_patch_size=2)
    b = DecodeParams(factor=32, temporal_patch_size=2, fps=1)
    assert a.differences(b) == {"factor": (28, 32), "fps": (2.0, 1)}
    assert DecodeParams.from_dict(a.to_dict()) == a
    with pytest.raises(ConfigError, match="unknown decode parameters"):
        DecodeParams.from_dict({**a.to_dict(), "fsp": 2})


def test_params_from_a_backend_budget() -> None:
    from videorl.backend import VisualBudget
    from videorl.media import ImageParams

    budget = VisualBudget.for_factor(32, video_total_pixels=10**7, video_fps=1.0)
    video = DecodeParams.from_budget(budget, factor=32, temporal_patch_size=2)
    assert (
        video.factor,
        video.fps,
        video.min_pixels,
        video.max_pixels,
        video.total_pixels,
        video.max_frames,
    ) == (
        32,
        1.0,
        4 * 32 * 32,
        262_144,
        10**7,
        128,
    )
    image = ImageParams.from_budget(budget, factor=32)
    assert (image.min_pixels, image.max_pixels) == (4 * 32 * 32, 1_048_576)


def test_every_frame_metadata_keeps_each_source_frame_at_its_time() -> None:
    from videorl.media import VideoMetadata

    meta = VideoMetadata.every_frame(4, 28, 56, fps=2.0)
    assert meta.frame_indices == (0, 1, 2, 3) and meta.timestamps == (0.0, 0.5, 1.0, 1.5)
    assert (meta.duration, meta.total_frames, meta.sampled_fps) == (2.0, 4, 2.0)
    assert (meta.height, meta.width, meta.source_height, meta.source_width) == (28, 56, 28, 56)
