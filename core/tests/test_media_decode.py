"""Decoding real (synthetic) files: which frames, their times and sizes, rotation, VFR, bad inputs."""

from __future__ import annotations

import dataclasses
import re
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import pytest

from videorl.media import DecodeParams, ImageParams, MediaError, decode_image, decode_video
from videorl.media.synthetic import index_frame, index_frames, read_index, write_audio_only, write_video

P = DecodeParams(factor=28, temporal_patch_size=2)
MakeClip = Callable[..., Path]


def test_constant_rate_clip_gives_hand_computed_frames_and_times(make_clip: MakeClip) -> None:
    frames, meta = decode_video(make_clip(frames=60, fps=30), P)
    # 2 s at 2 fps -> 4 frames at linspace(0, 59, 4) = 0, 19.67, 39.33, 59
    assert meta.frame_indices == (0, 20, 39, 59)
    assert meta.timestamps == pytest.approx((0.0, 20 / 30, 39 / 30, 59 / 30), abs=1e-6)
    assert [read_index(f) for f in frames] == [0, 20, 39, 59]
    assert frames.dtype == np.uint8 and frames.shape == (4, 3, 112, 224)
    assert (meta.total_frames, meta.source_fps, meta.duration) == (
        60,
        pytest.approx(30.0),
        pytest.approx(2.0),
    )
    assert (meta.source_width, meta.source_height, meta.width, meta.height) == (224, 112, 224, 112)
    assert meta.decoder == "pyav" and av.__version__ in meta.decoder_version


def test_frames_are_resized_to_the_budget_with_the_factor(make_clip: MakeClip) -> None:
    clip = make_clip(frames=8, height=240, width=320)
    frames, meta = decode_video(clip, DecodeParams(factor=32, temporal_patch_size=2, max_pixels=40000))
    # 240x320 over 40000 px: beta sqrt(76800/40000)=1.386; floor(173.2/32)=5 -> 160, floor(230.9/32)=7 -> 224
    assert frames.shape == (4, 3, 160, 224) and (meta.height, meta.width) == (160, 224)
    assert [read_index(f) for f in frames] == [0, 2, 5, 7]  # linspace(0, 7, 4) = 0, 2.33, 4.67, 7


def test_max_frames_and_seeking_across_keyframes(make_clip: MakeClip) -> None:
    """300 frames with a keyframe every 10: the decoder seeks between samples and lands exactly."""
    clip = make_clip(frames=300, gop=10)
    frames, meta = decode_video(clip, DecodeParams(factor=28, temporal_patch_size=2, fps=1, max_frames=8))
    assert meta.frame_indices == (0, 43, 85, 128, 171, 214, 256, 299)
    assert [read_index(f) for f in frames] == list(meta.frame_indices)


def test_time_range_samples_the_clip_as_a_video_of_its_length(make_clip: MakeClip) -> None:
    """300 frames at 30 fps (10 s), a keyframe every 10: the decoder seeks into the clip."""
    clip = make_clip(frames=300, gop=10)
    frames, meta = decode_video(clip, dataclasses.replace(P, start=4.0, end=7.0))
    # frames 120..209 are shown during [4, 7) s; 3 s at 2 fps -> 6 frames, nearest to
    # 120 + linspace(0, 89, 6) = 120, 137.8, 155.6, 173.4, 191.2, 209
    assert meta.frame_indices == (120, 138, 156, 173, 191, 209)
    assert [read_index(f) for f in frames] == list(meta.frame_indices)
    assert meta.timestamps == pytest.approx((4.0, 4.6, 5.2, 173 / 30, 191 / 30, 209 / 30), abs=1e-6)
    assert (meta.duration, meta.sampled_fps, meta.extra["clip"]) == (
        pytest.approx(3.0),
        pytest.approx(2.0),
        [4.0, 7.0],
    )
    assert (meta.total_frames, meta.source_fps) == (300, pytest.approx(30.0))  # the source's, as the indices

    # the end is capped at the video's:
    # 1.5 s -> min_frames 4, at 255 + linspace(0, 44, 4) = 255, 269.67, 284.33, 299
    _, meta = decode_video(clip, dataclasses.replace(P, start=8.5, end=20.0))
    assert meta.frame_indices == (255, 270, 284, 299) and meta.duration == pytest.approx(1.5)
    assert meta.extra["clip"] == [8.5, pytest.approx(10.0)]
    # shorter than a frame: one temporal patch of the frame on screen at 4.01 s (frame 120)
    _, meta = decode_video(clip, dataclasses.replace(P, start=4.01, end=4.02))
    assert meta.frame_indices == (120, 120) and meta.duration == pytest.approx(0.01)
    # a range covering the whole video samples what no range does
    whole, ranged = decode_video(clip, P)[1], decode_video(clip, dataclasses.replace(P, start=0.0))[1]
    assert ranged.frame_indices == whole.frame_indices and ranged.duration == whole.duration
    assert "clip" not in whole.extra


def test_transformers_reads_a_clip_s_frame_rate_as_the_rate_of_its_frames(make_clip: MakeClip) -> None:
    """transformers' ``sampled_fps`` (Qwen2.5-VL's ``second_per_grid_ts`` = 2 / it) is frames /
    total_num_frames * fps: for a clip, total_num_frames is what the clip covers, not the video."""
    from transformers.video_utils import VideoMetadata as HFVideoMetadata

    clip = make_clip(frames=300, gop=10)  # 10 s at 30 fps
    whole = decode_video(clip, P)[1]  # 10 s at 2 fps: 20 frames
    ranged = decode_video(clip, dataclasses.replace(P, start=4.0, end=7.0))[1]  # 6 frames over 3 s
    for meta, total in ((whole, 300), (ranged, 90)):
        hf = HFVideoMetadata(**meta.to_hf_dict())
        assert (hf.total_num_frames, hf.sampled_fps) == (total, pytest.approx(2.0))
        assert hf.timestamps == pytest.approx(list(meta.timestamps), abs=1e-6)  # times in the video
    # a tool's segment: frames 0.5 s apart -> 2 fps whatever part of the video they come from
    segment = dataclasses.replace(
        whole, frame_indices=(150, 165, 180, 195), timestamps=(5.0, 5.5, 6.0, 6.5), duration=2.0,
        extra={"segment": (5.0, 6.5)},
    )  # fmt: skip
    assert HFVideoMetadata(**segment.to_hf_dict()).sampled_fps == pytest.approx(2.0)


@pytest.mark.parametrize(("start", "end", "until"), [(12.0, 15.5, "15.5 s"), (10.0, None, "the end")])
def test_time_range_past_the_end_names_the_file_and_both_values(
    make_clip: MakeClip, start: float, end: float | None, until: str
) -> None:
    clip = make_clip(frames=300)
    message = (
        f"{clip}: the time range from {start:g} s to {until} starts past the end of the video (10 s long)"
    )
    with pytest.raises(MediaError, match=re.escape(message)):
        decode_video(clip, dataclasses.replace(P, start=start, end=end))


def test_b_frames_are_reordered_by_timestamp(make_clip: MakeClip) -> None:
    clip = make_clip(frames=120, gop=30, codec_options={"preset": "medium", "bf": "3"})
    with av.open(str(clip)) as c:
        packets = [p for p in c.demux(c.streams.video[0]) if p.size]
        assert any(p.pts != p.dts for p in packets), "the clip should hold B-frames"
    frames, meta = decode_video(clip, DecodeParams(factor=28, temporal_patch_size=2, fps=2))
    assert meta.frame_indices == (0, 17, 34, 51, 68, 85, 102, 119)  # linspace(0, 119, 8)
    assert [read_index(f) for f in frames] == list(meta.frame_indices)


@pytest.mark.parametrize(
    ("name", "codec"),
    [
        ("c.mkv", "libx264"),
        ("c.webm", "libvpx-vp9"),
        ("c.mov", "libx264"),
        ("c.avi", "mpeg4"),
        ("c.ts", "libx264"),
    ],
)
def test_other_containers_and_codecs(make_clip: MakeClip, name: str, codec: str) -> None:
    frames, meta = decode_video(make_clip(name, frames=90, codec=codec), P)
    # 3 s at 2 fps: linspace(0, 89, 6) = 0, 17.8, 35.6, 53.4, 71.2, 89
    assert meta.frame_indices == (0, 18, 36, 53, 71, 89) and meta.duration == pytest.approx(3.0)
    assert [read_index(f) for f in frames] == list(meta.frame_indices)


def test_raw_stream_without_timestamps(make_clip: MakeClip) -> None:
    """A raw H.264 stream has no timestamps and cannot seek: frames are counted at FFmpeg's 25 fps."""
    frames, meta = decode_video(make_clip("raw.h264", frames=30), P)
    assert (meta.total_frames, meta.source_fps, meta.duration) == (30, 25.0, pytest.approx(1.2))
    assert meta.frame_indices == (0, 10, 19, 29) and meta.timestamps == (0.0, 0.4, 0.76, 1.16)
    assert [read_index(f) for f in frames] == [0, 10, 19, 29]


def test_variable_frame_rate_samples_evenly_in_time(tmp_path: Path) -> None:
    times = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 2.0, 3.0, 4.0]
    clip = write_video(tmp_path / "vfr.mp4", index_frames(len(times), 112, 224), times=times)
    frames, meta = decode_video(clip, DecodeParams(factor=28, temporal_patch_size=2, fps=1))
    # 4 targets at 0, 1.33, 2.67, 4 s: the nearest frames are at 0, 1, 3 and 4 s (by index: 0, 10, 12, 13)
    assert meta.frame_indices == (0, 10, 12, 13)
    assert meta.timestamps == pytest.approx((0.0, 1.0, 3.0, 4.0), abs=1e-3)
    assert [read_index(f) for f in frames] == [0, 10, 12, 13]
    assert meta.total_frames == 14 and 4.0 < meta.duration < 4.2


def test_one_frame_video_gives_one_temporal_patch(make_clip: MakeClip) -> None:
    frames, meta = decode_video(make_clip(frames=1), P)
    assert meta.frame_indices == (0, 0) and meta.timestamps == (0.0, 0.0) and meta.total_frames == 1
    assert frames.shape[0] == 2 and np.array_equal(frames[0], frames[1]) and read_index(frames[0]) == 0


@pytest.mark.parametrize(("rotation", "red_rows"), [(90, "bottom"), (-90, "top"), (180, "none")])
def test_display_matrix_rotation_is_applied(tmp_path: Path, rotation: int, red_rows: str) -> None:
    frame = np.zeros((32, 64, 3), dtype=np.uint8)
    frame[:, :16, 0] = 255  # red band on the left edge
    clip = write_video(tmp_path / "rot.mp4", [frame] * 4, rotation=rotation)
    frames, meta = decode_video(clip, DecodeParams(factor=8, temporal_patch_size=2, min_pixels=0))
    red = frames[0, 0].astype(int)
    if rotation == 180:  # upside down: the band moves to the right edge
        assert frames.shape[2:] == (32, 64) and red[:, -8:].mean() > 200 and red[:, :8].mean() < 50
        return
    # a quarter turn: portrait 32 wide, 64 tall; counter-clockwise puts the left edge at the bottom
    assert frames.shape[2:] == (64, 32) and (meta.source_width, meta.source_height) == (32, 64)
    assert meta.extra["rotation"] == rotation % 360
    top, bottom = red[:8].mean(), red[-8:].mean()
    assert (bottom > 200 and top < 50) if red_rows == "bottom" else (top > 200 and bottom < 50)


def test_resizing_happens_while_decoding(make_clip: MakeClip) -> None:
    """No full-resolution RGB frame is ever materialised: peak numpy memory stays below one."""
    clip = make_clip(frames=30, height=1080, width=1920)
    params = DecodeParams(factor=28, temporal_patch_size=2, fps=30, max_frames=30, max_pixels=224 * 224)
    tracemalloc.start()
    try:
        frames, _ = decode_video(clip, params)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    full_frame = 1080 * 1920 * 3
    assert frames.shape[0] == 30 and frames.nbytes < full_frame
    assert peak < full_frame, f"peak {peak} bytes: a full-size frame was converted"


def test_paths_with_spaces_and_non_ascii_characters(make_clip: MakeClip) -> None:
    _, meta = decode_video(make_clip("dossier été/clip vidéo 1 — 日本.mp4", frames=8), P)
    assert meta.frame_indices == (0, 2, 5, 7)


# --- bad inputs: each a MediaError that names the file --------------------------------------------


def _raises(path: Path, match: str) -> None:
    with pytest.raises(MediaError, match=match) as info:
        decode_video(path, P)
    assert str(path) in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    _raises(tmp_path / "nope.mp4", "file not found")


def test_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty.mp4").write_bytes(b"")
    _raises(tmp_path / "empty.mp4", "empty")


def test_truncated_mp4_without_its_index(make_clip: MakeClip) -> None:
    clip = make_clip(frames=60)
    data = clip.read_bytes()
    clip.write_bytes(data[: len(data) // 2])  # the moov box (at the end) is cut off
    _raises(clip, "truncated")


def test_truncated_mp4_with_its_index_first(make_clip: MakeClip) -> None:
    clip = make_clip(frames=60, faststart=True)
    data = clip.read_bytes()
    clip.write_bytes(data[: len(data) // 2])  # the index survives, half the frames do not
    _raises(clip, r"truncated: the header lists 60 frames")


def test_audio_only_file(tmp_path: Path) -> None:
    _raises(write_audio_only(tmp_path / "speech.mp4"), "no video stream .streams: audio")


def test_text_file_renamed_mp4(tmp_path: Path) -> None:
    (tmp_path / "notes.mp4").write_text("these are not frames\n" * 20)
    _raises(tmp_path / "notes.mp4", "not a media file")


def test_image_renamed_mp4(tmp_path: Path) -> None:
    with av.open(str(tmp_path / "picture.png"), "w") as c:  # a PNG, written by PyAV
        s = c.add_stream("png")
        s.width, s.height, s.pix_fmt = 64, 32, "rgb24"
        for p in s.encode(av.VideoFrame.from_ndarray(index_frame(3, 32, 64), format="rgb24")):
            c.mux(p)
    (tmp_path / "picture.png").rename(tmp_path / "picture.mp4")
    _raises(tmp_path / "picture.mp4", "is an image")


def test_video_without_frames(tmp_path: Path) -> None:
    with av.open(str(tmp_path / "zero.mkv"), "w") as c:
        s = c.add_stream("libx264", rate=30)
        s.width, s.height, s.pix_fmt = 64, 64, "yuv420p"
        c.start_encoding()
    _raises(tmp_path / "zero.mkv", "not a media file|holds no frames")


# --- images -----------------------------------------------------------------------------------------


def test_image_has_its_own_budget(tmp_path: Path) -> None:
    from PIL import Image

    Image.fromarray(index_frame(5, 480, 640)).save(tmp_path / "photo.png")
    image, meta = decode_image(
        tmp_path / "photo.png", ImageParams(factor=28, min_pixels=3136, max_pixels=50176)
    )
    # 480x640 over 50176 px: beta sqrt(307200/50176)=2.474; floor(194.0/28)=6 -> 168, floor(258.7/28)=9 -> 252
    assert image.shape == (3, 168, 252) and image.dtype == np.uint8
    assert (meta.source_width, meta.source_height, meta.width, meta.height) == (640, 480, 252, 168)
    assert read_index(image) == 5
    with pytest.raises(MediaError, match="not found"):
        decode_image(tmp_path / "gone.jpg", ImageParams(factor=28))
