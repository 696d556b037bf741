"""Decoding with PyAV: sample frames by time, resize each frame while decoding, honour rotation.

Two passes over the file: a demux pass (no decoding) lists every frame's timestamp and the keyframes,
which fixes the frame count, the duration and the frames to keep; the decode pass then converts only
the kept frames, resized by swscale straight to the target size, seeking past stretches that hold no
kept frame. Memory stays at one decoded frame plus the output, whatever the source size or length.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from videorl.data.files import regular_stat
from videorl.data.images import check_image_file, check_pixels
from videorl.errors import DataError
from videorl.media.errors import MediaError
from videorl.media.metadata import ImageMetadata, VideoMetadata
from videorl.media.params import DecodeParams, ImageParams
from videorl.media.sampling import frames_in_range, nearest_frames, num_frames
from videorl.media.sizing import fit_to_budget, frame_pixel_cap

DECODER = "pyav"
DECODER_VERSION = f"PyAV {av.__version__}, libavcodec {'.'.join(map(str, av.library_versions['libavcodec']))}"

_INTERPOLATION = {"bicubic": "BICUBIC", "bilinear": "BILINEAR", "area": "AREA", "lanczos": "LANCZOS"}


def _reason(exc: BaseException) -> str:
    """FFmpeg's message without the errno noise."""
    return str(getattr(exc, "strerror", None) or exc)


def _is_image_format(name: str) -> bool:
    return name == "image2" or name.endswith("_pipe")


@contextmanager
def _open(path: Path) -> Iterator[Any]:
    """The opened container; a missing, empty or unreadable file, or one that is not a regular file (a
    FIFO, a device), raises ``MediaError`` naming it."""
    size = regular_stat(path, MediaError).st_size
    if size == 0:
        raise MediaError(f"{path}: file is empty (0 bytes)")
    try:
        container = av.open(str(path))
    except (av.FFmpegError, OSError, UnicodeDecodeError) as exc:
        raise MediaError(f"{path}: not a media file FFmpeg can read, or truncated ({_reason(exc)})") from None
    try:
        yield container
    finally:
        container.close()


@dataclass(frozen=True)
class VideoIndex:
    """What the demux pass learns: every frame's timestamp (sorted, stream ticks) and the keyframes."""

    pts: np.ndarray
    keyframes: np.ndarray  # presentation indices of keyframes, ascending
    time_base: Fraction
    frame_ticks: int  # the duration of the last frame
    seekable: bool = True  # False when the stream carries no timestamps (raw elementary streams)

    @property
    def total_frames(self) -> int:
        return int(self.pts.size)

    @property
    def duration(self) -> float:
        return float((int(self.pts[-1] - self.pts[0]) + self.frame_ticks) * self.time_base)

    def seconds(self, index: int) -> float:
        return float(int(self.pts[index] - self.pts[0]) * self.time_base)

    def keyframe_before(self, index: int) -> int:
        pos = int(np.searchsorted(self.keyframes, index, side="right")) - 1
        return int(self.keyframes[pos]) if pos >= 0 else 0


def _video_stream(container: Any, path: Path) -> Any:
    if _is_image_format(container.format.name):
        raise MediaError(f"{path}: is an image ({container.format.name}), not a video; list it under images")
    if not container.streams.video:
        kinds = sorted({s.type for s in container.streams}) or ["none"]
        raise MediaError(f"{path}: has no video stream (streams: {', '.join(kinds)})")
    stream = container.streams.video[0]
    try:  # the header's frame size, before a frame is decoded: the pixel limit of every image
        check_pixels(stream.codec_context.width, stream.codec_context.height, str(path), what="each frame")
    except DataError as exc:
        raise MediaError(str(exc)) from None
    return stream


def index_video(container: Any, stream: Any, path: Path) -> VideoIndex:
    """Demux (without decoding) the video stream's packets into a :class:`VideoIndex`."""
    time_base = stream.time_base or Fraction(1, 1)
    rate = stream.average_rate or stream.guessed_rate
    tick = max(round(1 / (rate * time_base)), 1) if rate else 1  # one frame, in stream ticks
    rows: list[tuple[int, bool]] = []
    listed, timed = 0, True
    try:
        for packet in container.demux(stream):
            if packet.size == 0:
                continue
            listed += 1
            if packet.is_discard:
                continue
            ts = packet.pts if packet.pts is not None else packet.dts
            if ts is None:  # no timestamps (e.g. a raw H.264 stream): frames at the nominal rate
                timed = False
                ts = rows[-1][0] + tick if rows else 0
            rows.append((int(ts), bool(packet.is_keyframe)))
    except av.FFmpegError as exc:
        raise MediaError(f"{path}: corrupt container after {len(rows)} frames ({_reason(exc)})") from None
    if not rows:
        raise MediaError(f"{path}: the video stream holds no frames")
    header = int(stream.frames or 0) if "mp4" in container.format.name else 0  # others count otherwise
    if header > listed:
        raise MediaError(f"{path}: truncated: the header lists {header} frames, the file holds {listed}")
    rows.sort(key=lambda r: r[0])
    pts = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    keyframes = np.flatnonzero(np.fromiter((r[1] for r in rows), dtype=bool, count=len(rows)))
    # the last frame lasts as long as the typical frame (containers disagree on its own duration)
    last = int(np.median(np.diff(pts))) if len(rows) > 1 else tick
    return VideoIndex(
        pts=pts, keyframes=keyframes, time_base=Fraction(time_base), frame_ticks=last, seekable=timed
    )


def _rotated(rotation: int) -> int:
    """Quarter turns counter-clockwise that display the frame upright."""
    return round(rotation / 90) % 4


def _to_rgb(frame: Any, height: int, width: int, quarter_turns: int, interpolation: str) -> np.ndarray:
    """``3×H×W`` uint8, resized by swscale while converting, then rotated upright."""
    dh, dw = (width, height) if quarter_turns % 2 else (height, width)
    rgb = frame.to_ndarray(width=dw, height=dh, format="rgb24", interpolation=_INTERPOLATION[interpolation])
    if quarter_turns:
        rgb = np.rot90(rgb, quarter_turns)
    return rgb.transpose(2, 0, 1)


def _decode_selected(
    container: Any, stream: Any, index: VideoIndex, wanted: np.ndarray, take: Callable[[int, int, Any], None]
) -> int:
    """Decode in order, calling ``take(slot, frame_index, frame)`` for each wanted frame; seek to the
    keyframe before a wanted frame when a whole group of pictures lies between. Returns slots filled."""
    position = {int(p): i for i, p in enumerate(index.pts)}
    slot, last, can_seek = 0, -1, index.seekable
    while slot < len(wanted):
        key = index.keyframe_before(int(wanted[slot]))
        seeked = can_seek and key > last + 1
        if seeked:
            container.seek(int(index.pts[key]), stream=stream, backward=True)
        restart = False
        for frame in container.decode(stream):
            ts = frame.pts if frame.pts is not None else frame.dts
            i = position.get(int(ts)) if ts is not None and index.seekable else last + 1
            if i is None:
                continue
            if seeked:
                seeked = False
                if i > wanted[slot]:  # the seek overshot: decode from the start without seeking
                    container.seek(int(index.pts[0]), stream=stream, backward=True)
                    can_seek, last, restart = False, -1, True
                    break
            last = i
            while slot < len(wanted) and i >= wanted[slot]:
                take(slot, i, frame)
                slot += 1
            if slot == len(wanted) or (can_seek and index.keyframe_before(int(wanted[slot])) > i + 1):
                restart = True
                break
        if not restart:
            break
    return slot


def decode_video(
    path: str | os.PathLike[str], params: DecodeParams, *, threads: int = 0
) -> tuple[np.ndarray, VideoMetadata]:
    """Sample and resize a video: uint8 frames ``T×3×H×W`` and the :class:`VideoMetadata`.

    With a time range (``params.start``/``end``) only the frames shown during it are sampled, as a
    whole video would be (the count from the range's duration, ``end`` capped at the video's); the
    metadata's indices and timestamps stay those of the source, its ``duration`` is the range's
    (what the frames cover, so ``sampled_fps`` is their rate) and ``extra["clip"]`` holds the range.
    ``threads`` is the decoder's thread count (0: let FFmpeg choose). Raises ``MediaError`` naming
    the file for anything that is not a decodable video, or a range starting past its end.
    """
    path = Path(path)
    with _open(path) as container:
        index = index_video(container, _video_stream(container, path), path)
    start = params.start or 0.0
    end = index.duration if params.end is None else min(params.end, index.duration)
    if start >= index.duration:
        until = "the end" if params.end is None else f"{params.end:g} s"
        raise MediaError(
            f"{path}: the time range from {start:g} s to {until} starts past the end of the video "
            f"({index.duration:g} s long)"
        )
    first, stop = frames_in_range(index.pts, index.time_base, start, params.end)
    with _open(path) as container:  # reopened rather than rewound: not every stream can seek
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        stream.codec_context.thread_count = threads
        n = num_frames(stop - first, end - start, params)
        wanted = first + nearest_frames(index.pts[first:stop], n)  # seeks to the range like any stretch
        state: dict[str, Any] = {}
        taken = np.empty(n, dtype=np.int64)

        def take(slot: int, i: int, frame: Any) -> None:
            if "out" not in state:
                turns = _rotated(frame.rotation or 0)
                sh, sw = (frame.width, frame.height) if turns % 2 else (frame.height, frame.width)
                cap = frame_pixel_cap(
                    n,
                    min_pixels=params.min_pixels,
                    max_pixels=params.max_pixels,
                    total_pixels=params.total_pixels,
                    temporal_patch_size=params.temporal_patch_size,
                )
                h, w = _fit(path, sh, sw, params.factor, params.min_pixels, cap)
                state.update(out=np.empty((n, 3, h, w), dtype=np.uint8), turns=turns, source=(sh, sw))
            out = state["out"]
            if slot and taken[slot - 1] == i:
                out[slot] = out[slot - 1]
            else:
                out[slot] = _to_rgb(frame, out.shape[2], out.shape[3], state["turns"], params.interpolation)
            taken[slot] = i

        try:
            filled = _decode_selected(container, stream, index, wanted, take)
        except av.FFmpegError as exc:
            raise MediaError(f"{path}: decoding failed ({_reason(exc)})") from None
        if filled < n:
            raise MediaError(
                f"{path}: decoded only {filled} of the {n} frames to sample; the file is truncated or corrupt"
            )
        out, (sh, sw) = state["out"], state["source"]
        meta = VideoMetadata(
            source_fps=index.total_frames / index.duration if index.duration > 0 else 0.0,
            total_frames=index.total_frames,
            duration=end - start,
            frame_indices=tuple(int(i) for i in taken),
            timestamps=tuple(round(index.seconds(int(i)), 6) for i in taken),
            source_width=sw,
            source_height=sh,
            width=out.shape[3],
            height=out.shape[2],
            decoder=DECODER,
            decoder_version=DECODER_VERSION,
            extra={"rotation": state["turns"] * 90, "codec": stream.codec_context.name}
            | ({"clip": [start, end]} if params.has_range else {}),
        )
    return out, meta


def _fit(
    path: str | os.PathLike[str], height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """:func:`fit_to_budget`, with the file named when the frame cannot be sized (its aspect ratio)."""
    try:
        return fit_to_budget(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
    except DataError as exc:
        raise MediaError(f"{path}: {exc}") from None


def decode_image(path: str | os.PathLike[str], params: ImageParams) -> tuple[np.ndarray, ImageMetadata]:
    """Decode and resize an image to its own budget: uint8 ``3×H×W`` and :class:`ImageMetadata`. Its
    header is read first (Pillow): a file that is not a regular file, or an image over the pixel
    limit of every image (:func:`~videorl.data.images.check_pixels`), is refused before decoding."""
    path = Path(path)
    try:
        check_image_file(path)
    except DataError as exc:
        raise MediaError(str(exc)) from None
    with _open(path) as container:
        if not container.streams.video:
            raise MediaError(f"{path}: not an image (no picture stream)")
        try:
            frame = next(container.decode(video=0), None)
        except av.FFmpegError as exc:
            raise MediaError(f"{path}: decoding failed ({_reason(exc)})") from None
        if frame is None:
            raise MediaError(f"{path}: holds no picture")
        turns = _rotated(frame.rotation or 0)
        sh, sw = (frame.width, frame.height) if turns % 2 else (frame.height, frame.width)
        h, w = _fit(path, sh, sw, params.factor, params.min_pixels, params.max_pixels)
        image = np.ascontiguousarray(_to_rgb(frame, h, w, turns, params.interpolation))
    return image, ImageMetadata(
        source_width=sw, source_height=sh, width=w, height=h, decoder=DECODER, decoder_version=DECODER_VERSION
    )
