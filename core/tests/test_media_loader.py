"""The one media loader (training's encoder and evaluation's inputs) and the one VideoMetadata -> MediaInfo
mapping."""

from __future__ import annotations

from pathlib import Path

import pytest

from videorl.backend import VisualBudget
from videorl.encoding import PromptEncoder
from videorl.errors import DataError
from videorl.eval.inputs import RowInputs
from videorl.media import DecodeParams, ImageParams, MediaCache, VideoMetadata
from videorl.media.info import MediaInfo
from videorl.media.loader import MediaLoader
from videorl.media.synthetic import textured_frames, write_video


class _Geometry:
    factor, temporal_patch_size = 28, 2


def test_media_info_from_metadata_maps_source_and_resized_sizes() -> None:
    meta = VideoMetadata(
        source_fps=30.0,
        total_frames=90,
        duration=3.0,
        frame_indices=(0, 15, 30, 45),
        timestamps=(0, 0.5, 1, 1.5),
        source_width=640,
        source_height=360,
        width=112,
        height=56,
    )
    assert MediaInfo.from_metadata(meta) == MediaInfo(
        duration=3.0, fps=30.0, num_frames=4, width=640, height=360, resized_width=112, resized_height=56
    )


def test_loader_from_a_budget_builds_one_entry_per_video_and_clip(tmp_path: Path) -> None:
    video = write_video(tmp_path / "v.mp4", textured_frames(30, 64, 96), fps=10.0)
    budget = VisualBudget.for_factor(28, video_fps=2.0, video_max_frames=8, video_max_pixels=56 * 84)
    loader = MediaLoader.for_budget(MediaCache(tmp_path / "cache"), budget, _Geometry())  # type: ignore[arg-type]
    assert loader.video_params == DecodeParams(
        factor=28, temporal_patch_size=2, fps=2.0, max_frames=8, min_pixels=3136, max_pixels=56 * 84
    )
    assert loader.image_params == ImageParams(factor=28, min_pixels=3136, max_pixels=1_048_576)
    frames, meta = loader.video(str(video))
    assert tuple(frames.shape) == (6, 3, 56, 84) and meta.num_frames == 6  # 3 s at 2 fps, an even count
    clipped, clip_meta = loader.video(str(video), (1.0, 2.0))
    # 1 s at 2 fps is 2 frames, raised to min_frames (4)
    assert clipped.shape[0] == 4 and clip_meta.duration == pytest.approx(1.0)
    assert len(list(loader.cache.entry_paths())) == 2
    with pytest.raises(DataError, match="a folder of frames"):
        loader.video(str(tmp_path))


def test_training_and_evaluation_share_the_loader(tmp_path: Path) -> None:
    cache = MediaCache(tmp_path / "cache")
    video = DecodeParams(factor=28, temporal_patch_size=2)
    image = ImageParams(factor=28)
    inputs = RowInputs(object(), cache, video, image)  # type: ignore[arg-type]
    encoder = PromptEncoder(object(), MediaLoader(cache, video, image), templates=None)  # type: ignore[arg-type]
    assert isinstance(inputs.media, MediaLoader) and isinstance(encoder.media, MediaLoader)
    for user in (inputs, encoder):
        assert (user.media.cache, user.media.video_params, user.media.image_params) == (cache, video, image)
