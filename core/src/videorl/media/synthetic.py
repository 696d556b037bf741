"""Synthetic media written with PyAV, for tests, benchmarks and the demo.

:func:`write_video` encodes any frames (H.264 by default), at a constant rate or at given times
(variable frame rate), optionally with a display-matrix rotation. :func:`index_frame` draws a frame
whose stripes encode its index, and :func:`read_index` reads it back from a decoded (even resized)
frame, so tests can check which source frames were sampled.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import cast

import av
import numpy as np
from av.video.stream import VideoStream

INDEX_BITS = 12


def write_video(
    path: str | os.PathLike[str],
    frames: Iterable[np.ndarray],
    *,
    fps: float = 30.0,
    times: Sequence[float] | None = None,
    codec: str = "libx264",
    rotation: int = 0,
    crf: int = 18,
    gop: int | None = None,
    faststart: bool = False,
    codec_options: dict[str, str] | None = None,
) -> Path:
    """Encode ``H×W×3`` uint8 RGB frames to ``path`` and return it.

    ``times`` (seconds, increasing) gives each frame's presentation time for a variable-rate video;
    otherwise frames are ``1/fps`` apart. ``rotation`` (degrees counter-clockwise, a multiple of 90)
    is stored as the display matrix; ``gop`` sets the keyframe interval; ``faststart`` puts the index
    at the front of an MP4; ``codec_options`` go to the encoder (e.g. ``{"preset": "medium"}`` for
    B-frames).
    """
    path = Path(path)
    options = {"movflags": "+faststart"} if faststart else {}
    time_base = Fraction(1, 1000) if times is not None else Fraction(1, round(fps * 512))
    rate = Fraction(fps).limit_denominator(1001)
    with av.open(str(path), "w", options=options) as container:
        stream: VideoStream | None = None
        for i, rgb in enumerate(frames):
            if stream is None:
                stream = cast(VideoStream, container.add_stream(codec, rate=rate))
                stream.height, stream.width = rgb.shape[0], rgb.shape[1]
                stream.pix_fmt = "yuv420p"
                stream.time_base = time_base
                stream.codec_context.time_base = time_base
                opts = {"crf": str(crf), "preset": "ultrafast"} if codec == "libx264" else {}
                if gop is not None:
                    stream.codec_context.gop_size = gop
                    if codec == "libx264":
                        opts["x264-params"] = f"keyint={gop}:min-keyint={gop}:scenecut=0"
                stream.codec_context.options = {**opts, **(codec_options or {})}
                if rotation:
                    stream.set_display_rotation(rotation)
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb, dtype=np.uint8), format="rgb24")
            seconds = times[i] if times is not None else i / fps
            frame.pts = round(seconds / time_base)
            frame.time_base = time_base
            for packet in stream.encode(frame):
                container.mux(packet)
        if stream is None:
            raise ValueError("write_video needs at least one frame")
        for packet in stream.encode():
            container.mux(packet)
    return path


def index_frame(index: int, height: int, width: int, *, bits: int = INDEX_BITS) -> np.ndarray:
    """An ``H×W×3`` frame whose ``bits`` vertical stripes (most significant first) spell ``index``
    in white on black; a grey ramp fills the lower quarter so the frame is not trivially flat."""
    frame = np.zeros((height, width, 3), dtype=np.uint8)
    bands = np.arange(width) * bits // width
    on = (index >> (bits - 1 - bands)) & 1
    frame[: height * 3 // 4] = (on * 255).astype(np.uint8)[None, :, None]
    frame[height * 3 // 4 :] = (np.arange(width) * 255 // max(width - 1, 1)).astype(np.uint8)[None, :, None]
    return frame


def read_index(frame: np.ndarray, *, bits: int = INDEX_BITS) -> int:
    """The index drawn by :func:`index_frame`, from a ``3×H×W`` or ``H×W×3`` decoded frame."""
    frame = np.asarray(frame)
    if frame.ndim == 3 and frame.shape[0] == 3 and frame.shape[2] != 3:
        frame = frame.transpose(1, 2, 0)
    height, width = frame.shape[:2]
    rows = frame[height // 8 : height * 5 // 8].astype(np.float32).mean(axis=(0, 2))
    value = 0
    for b in range(bits):
        lo, hi = b * width // bits, (b + 1) * width // bits
        quarter = (hi - lo) // 4
        band = rows[lo + quarter : hi - quarter] if hi - lo > 2 else rows[lo : max(hi, lo + 1)]
        value = (value << 1) | int(band.mean() > 127)
    return value


def index_frames(count: int, height: int, width: int) -> Iterable[np.ndarray]:
    """Frames 0..count-1 drawn by :func:`index_frame`."""
    return (index_frame(i, height, width) for i in range(count))


def textured_frames(count: int, height: int, width: int, *, seed: int = 0) -> Iterable[np.ndarray]:
    """Frames of a scrolling texture with a moving square: a bitrate and decode cost close to footage."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, size=((height + 64) // 8 + 1, (width + 64) // 8 + 1, 3)).astype(np.float32)
    texture: np.ndarray = np.repeat(np.repeat(coarse, 8, axis=0), 8, axis=1)
    for axis in (0, 1):  # two passes of a box blur soften the blocks into a smooth texture
        for _ in range(2):
            texture = (texture + np.roll(texture, 4, axis=axis) + np.roll(texture, -4, axis=axis)) / 3
    texture = texture.astype(np.uint8)
    side = max(8, min(height, width) // 6)
    for i in range(count):
        dy, dx = (i * 2) % 64, (i * 3) % 64
        frame = texture[dy : dy + height, dx : dx + width].copy()
        y = (i * 5) % max(height - side, 1)
        x = (i * 7) % max(width - side, 1)
        frame[y : y + side, x : x + side] = (220, 40, 40)
        yield frame


def write_audio_only(path: str | os.PathLike[str], seconds: float = 1.0, *, sample_rate: int = 16000) -> Path:
    """An audio-only file (AAC in MP4 when ``path`` ends in .mp4/.m4a): a video decoder must refuse it."""
    path = Path(path)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("aac", rate=sample_rate)
        stream.layout = "mono"
        samples = int(seconds * sample_rate)
        t = np.arange(samples, dtype=np.float32) / sample_rate
        tone = (0.2 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)[None, :]
        chunk = 1024
        for start in range(0, samples, chunk):
            frame = av.AudioFrame.from_ndarray(tone[:, start : start + chunk], format="fltp", layout="mono")
            frame.sample_rate = sample_rate
            frame.pts = start
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
