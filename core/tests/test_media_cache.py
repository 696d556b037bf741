"""The frame cache: keys, round trips, source modes, damaged entries, changed sources, killed writers."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from videorl.errors import ConfigError
from videorl.media import (
    CacheMissError,
    CorruptEntryError,
    DecodeParams,
    MediaCache,
    MediaError,
    MediaRef,
    ParamsMismatchError,
    SourceChangedError,
    cache_key,
    decode_video,
    read_entry,
    read_header,
)
from videorl.media import cache as cache_module
from videorl.media.synthetic import read_index

P = DecodeParams(factor=28, temporal_patch_size=2)
MakeClip = Callable[..., Path]


def test_round_trip_equals_decoding(make_clip: MakeClip, tmp_path: Path) -> None:
    clip = make_clip(frames=60)
    cache = MediaCache(tmp_path / "cache")
    ref = cache.get_or_build(clip, P)
    frames, meta = cache.load(ref, P)
    expected, expected_meta = decode_video(clip, P)
    assert frames.dtype.__str__() == "torch.uint8" and tuple(frames.shape) == expected.shape
    assert np.array_equal(frames.numpy(), expected) and meta == expected_meta
    as_numpy, meta2 = cache.load_numpy(ref, P)
    assert np.array_equal(as_numpy, expected) and meta2 == expected_meta
    assert [read_index(f) for f in as_numpy] == [0, 20, 39, 59]

    entry = cache.entry_path(ref.key or "")
    assert entry.parent.parent == tmp_path / "cache" / "entries" and entry.name == f"{ref.key}.safetensors"
    raw = entry.read_bytes()
    header = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])  # plain safetensors: JSON header
    assert header["frames"]["dtype"] == "U8" and header["frames"]["shape"] == [4, 3, 112, 224]
    stored = header["__metadata__"]
    assert json.loads(stored["params"]) == P.to_dict()
    assert json.loads(stored["metadata"])["frame_indices"] == [0, 20, 39, 59]
    assert stored["checksum"].startswith("crc32:")


def test_key_changes_with_every_parameter_and_the_format_version(monkeypatch: pytest.MonkeyPatch) -> None:
    sha = "ab" * 32
    other_values = {
        "factor": 32,
        "temporal_patch_size": 1,
        "fps": 1.0,
        "max_frames": 64,
        "min_frames": 2,
        "min_pixels": 4096,
        "max_pixels": 131072,
        "total_pixels": 10**7,
        "interpolation": "bilinear",
        "start": 1.0,
        "end": 2.0,
    }
    assert set(other_values) == {f.name for f in dataclasses.fields(DecodeParams)}
    keys = {cache_key(sha, P)}
    for name, value in other_values.items():
        keys.add(cache_key(sha, dataclasses.replace(P, **{name: value})))
    assert len(keys) == 1 + len(other_values)
    assert cache_key(sha, dataclasses.replace(P, fps=2)) == cache_key(sha, P)  # 2 and 2.0 are one value
    before = cache_key(sha, P)
    monkeypatch.setattr(cache_module, "CACHE_FORMAT_VERSION", cache_module.CACHE_FORMAT_VERSION + 1)
    assert cache_key(sha, P) != before


def test_key_without_a_time_range_is_the_one_before_ranges_existed() -> None:
    # computed before DecodeParams had start/end: caches built then stay valid
    assert P.to_json() == (
        '{"factor":28,"fps":2.0,"interpolation":"bicubic","max_frames":128,"max_pixels":262144,'
        '"min_frames":4,"min_pixels":3136,"temporal_patch_size":2,"total_pixels":null}'
    )
    assert cache_key("ab" * 32, P) == "abababababababababababababababab-1bb9c764f05bd80f"
    assert "start" not in P.to_dict() and DecodeParams.from_dict(P.to_dict()) == P


def test_key_differs_per_time_range() -> None:
    sha = "ab" * 32
    ranges = [(1.0, 2.0), (1.0, 3.0), (0.0, 2.0), (1.0, None), (None, 2.0)]
    keys = {cache_key(sha, dataclasses.replace(P, start=a, end=b)) for a, b in ranges}
    assert len(keys) == len(ranges) and cache_key(sha, P) not in keys
    assert cache_key(sha, dataclasses.replace(P, start=1, end=2)) == cache_key(
        sha, dataclasses.replace(P, start=1.0, end=2.0)
    )
    clip = dataclasses.replace(P, start=1.0, end=2.0)
    assert (
        json.loads(clip.to_json())["start"] == 1.0
        and DecodeParams.from_dict(json.loads(clip.to_json())) == clip
    )


def test_key_follows_content_not_path(make_clip: MakeClip, tmp_path: Path) -> None:
    a = make_clip("a.mp4", frames=30)
    b = make_clip("b.mp4", frames=31)
    copy = tmp_path / "elsewhere" / "copy of a.mp4"
    copy.parent.mkdir()
    copy.write_bytes(a.read_bytes())
    cache = MediaCache(tmp_path / "cache")
    ka, kb, kc = (cache.get_or_build(v, P).key for v in (a, b, copy))
    assert ka != kb and ka == kc
    assert len(list(cache.entry_paths())) == 2  # identical content stored once


def test_replaced_source_never_hits_the_stale_entry(make_clip: MakeClip, tmp_path: Path) -> None:
    clip = make_clip("v.mp4", frames=60)
    cache = MediaCache(tmp_path / "cache")
    old = cache.get_or_build(clip, P)
    stat = clip.stat()
    make_clip("v.mp4", frames=90)  # another video at the same path
    os.utime(clip, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    strict = MediaCache(tmp_path / "cache", "preprocessed_only")
    with pytest.raises(SourceChangedError, match="changed since the cache was built"):
        strict.load(str(clip), P)
    frames, meta = cache.load(str(clip), P)  # prefer_preprocessed: rebuilt from the new content
    # 3 s at 2 fps: 6 frames at linspace(0, 89, 6) = 0, 17.8, 35.6, 53.4, 71.2, 89
    assert meta.total_frames == 90 and [read_index(f) for f in frames] == [0, 18, 36, 53, 71, 89]
    assert cache.resolve(clip, P).key != old.key


def test_truncated_entry_is_detected_and_rebuilt(make_clip: MakeClip, tmp_path: Path) -> None:
    clip = make_clip(frames=60)
    cache = MediaCache(tmp_path / "cache")
    ref = cache.get_or_build(clip, P)
    entry = cache.entry_path(ref.key or "")
    entry.write_bytes(entry.read_bytes()[:-1000])
    with pytest.raises(CorruptEntryError, match="truncated") as info:
        MediaCache(tmp_path / "cache", "preprocessed_only").load(ref, P)
    assert str(entry) in str(info.value) and "videorl cache build" in str(info.value)
    frames, meta = cache.load_numpy(ref, P)  # prefer_preprocessed rebuilds it
    assert [read_index(f) for f in frames] == list(meta.frame_indices) == [0, 20, 39, 59]
    assert read_entry(entry, framework="numpy")[1].key == ref.key


@pytest.mark.parametrize("where", ["frames", "header"])
def test_corrupted_entry_fails_its_checksum(make_clip: MakeClip, tmp_path: Path, where: str) -> None:
    cache = MediaCache(tmp_path / "cache", "preprocessed_only")
    ref = MediaCache(tmp_path / "cache").get_or_build(make_clip(frames=60), P)
    entry = cache.entry_path(ref.key or "")
    data = bytearray(entry.read_bytes())
    if where == "frames":
        data[-5000] ^= 0x40
    else:  # a timestamp digit changed, same length: still valid JSON, still a safetensors file
        at = data.index(b"0.666667")
        data[at : at + 8] = b"0.766667"
    entry.write_bytes(bytes(data))
    with pytest.raises(CorruptEntryError, match="checksum mismatch"):
        cache.load_numpy(ref, P)


def test_entry_for_other_parameters_names_the_difference(make_clip: MakeClip, tmp_path: Path) -> None:
    clip = make_clip(frames=60)
    MediaCache(tmp_path / "cache").get_or_build(clip, P)
    run = dataclasses.replace(P, max_pixels=131072, fps=1.0)
    for mode in ("preprocessed_only", "prefer_preprocessed"):
        with pytest.raises(ParamsMismatchError) as info:
            MediaCache(tmp_path / "cache", mode).load_numpy(str(clip), run)  # type: ignore[arg-type]
        message = str(info.value)
        assert "fps=2.0 (this run: 1.0)" in message and "max_pixels=262144 (this run: 131072)" in message
        assert "factor=" not in message  # only what differs is named
    relaxed = MediaCache(tmp_path / "cache", strict_params=False)
    _, meta = relaxed.load_numpy(str(clip), run)
    assert meta.num_frames == 4 and len(list(relaxed.entry_paths())) == 2


def test_other_time_ranges_of_the_same_budget_are_not_a_mismatch(make_clip: MakeClip, tmp_path: Path) -> None:
    clip = make_clip(frames=60)  # 2 s at 30 fps
    MediaCache(tmp_path / "cache").get_or_build(clip, P)
    strict = MediaCache(tmp_path / "cache")
    _, meta = strict.load_numpy(str(clip), dataclasses.replace(P, start=0.5, end=1.5))
    # frames 15..44 shown during [0.5, 1.5) s;
    # 1 s at 2 fps -> min_frames 4 at linspace(0, 29, 4) = 0, 9.67, 19.33, 29
    assert meta.frame_indices == (15, 25, 34, 44) and len(list(strict.entry_paths())) == 2
    with pytest.raises(ParamsMismatchError) as info:  # another budget still is, named without the range
        strict.load_numpy(str(clip), dataclasses.replace(P, fps=1.0, start=0.0, end=1.0))
    assert "fps=2.0 (this run: 1.0)" in str(info.value) and "start=" not in str(info.value)
    with pytest.raises(CacheMissError, match="Time-range entries are built on first use"):
        MediaCache(tmp_path / "cache", "preprocessed_only").resolve(clip, dataclasses.replace(P, start=0.2))


def test_ref_carrying_other_parameters_is_refused(make_clip: MakeClip, tmp_path: Path) -> None:
    cache = MediaCache(tmp_path / "cache")
    ref = cache.get_or_build(make_clip(frames=60), P)
    with pytest.raises(ParamsMismatchError, match=r"min_frames=4 \(this run: 2\)"):
        cache.load_numpy(ref, dataclasses.replace(P, min_frames=2))


def test_source_modes(make_clip: MakeClip, tmp_path: Path) -> None:
    clip = make_clip(frames=60)
    root = tmp_path / "cache"
    live = MediaCache(None, "realtime_only")
    _, meta = live.load_numpy(str(clip), P)
    assert meta.frame_indices == (0, 20, 39, 59) and live.resolve(clip, P).key is None
    with pytest.raises(CacheMissError, match="videorl cache build .*--factor 28"):
        MediaCache(root, "preprocessed_only").resolve(clip, P)
    assert not list(MediaCache(root).entry_paths())
    with pytest.raises(ConfigError, match="choose one of"):
        MediaCache(root, "cache_first")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs a cache directory"):
        MediaCache(None, "prefer_preprocessed")
    with pytest.raises(ConfigError, match="does not build"):
        MediaCache(root, "preprocessed_only").get_or_build(clip, P)


def test_preprocessed_only_serves_a_cache_without_the_raw_video(make_clip: MakeClip, tmp_path: Path) -> None:
    clip = make_clip(frames=60)
    ref = MediaCache(tmp_path / "cache").get_or_build(clip, P)
    clip.unlink()
    strict = MediaCache(tmp_path / "cache", "preprocessed_only")
    assert strict.resolve(clip, P) == ref
    assert strict.load_numpy(str(clip), P)[1].frame_indices == (0, 20, 39, 59)
    with pytest.raises(MediaError, match="file not found"):
        MediaCache(tmp_path / "cache").resolve(clip, P)


def test_media_ref_travels_as_json_or_pickle(make_clip: MakeClip, tmp_path: Path) -> None:
    ref = MediaCache(tmp_path / "cache").get_or_build(make_clip(frames=8), P)
    assert MediaRef.from_dict(json.loads(json.dumps(ref.to_dict()))) == ref
    assert pickle.loads(pickle.dumps(ref)) == ref
    assert read_header(MediaCache(tmp_path / "cache").entry_path(ref.key or "")).shape == (4, 3, 112, 224)


# --- atomicity: a writer killed part-way, and two writers at once ------------------------------------

_WRITER = textwrap.dedent(
    """
    import os, sys
    import safetensors.numpy
    from videorl.media import DecodeParams, MediaCache

    mode, root, video = sys.argv[1:4]
    real_save, real_replace = safetensors.numpy.save_file, os.replace

    def half_save(tensors, filename, metadata=None):
        real_save(tensors, filename, metadata=metadata)
        data = open(filename, "rb").read()
        with open(filename, "wb") as f:
            f.write(data[: len(data) // 2])
        print("READY", flush=True)
        sys.stdin.readline()

    def stalled_replace(src, dst):
        if str(dst).endswith(".safetensors"):
            print("READY", flush=True)
            sys.stdin.readline()
        real_replace(src, dst)

    if mode == "mid-write":
        safetensors.numpy.save_file = half_save
    else:
        os.replace = stalled_replace
    MediaCache(root).get_or_build(video, DecodeParams(factor=28, temporal_patch_size=2))
    print("DONE", flush=True)
    """
)


def _writer(mode: str, root: Path, video: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, mode, str(root), str(video)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY", "the writer did not reach the write"
    return proc


@pytest.mark.parametrize("mode", ["mid-write", "before-rename"])
def test_killed_writer_leaves_no_entry(make_clip: MakeClip, tmp_path: Path, mode: str) -> None:
    clip, root = make_clip(frames=60), tmp_path / "cache"
    proc = _writer(mode, root, clip)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    cache = MediaCache(root, "preprocessed_only")
    assert not list(cache.entry_paths()), "a killed writer left an entry"
    assert len(cache.temp_files()) == 1  # its temporary file, which verify/gc remove
    with pytest.raises(CacheMissError):
        cache.load_numpy(str(clip), P)
    frames, meta = MediaCache(root).load_numpy(str(clip), P)  # the next run builds it whole
    assert meta.frame_indices == (0, 20, 39, 59) and frames.shape == (4, 3, 112, 224)


def test_two_writers_of_one_entry(make_clip: MakeClip, tmp_path: Path) -> None:
    clip, root = make_clip(frames=60), tmp_path / "cache"
    slow = _writer("before-rename", root, clip)  # holds a finished temporary file, not yet renamed
    ref = MediaCache(root).get_or_build(clip, P)  # a second writer completes meanwhile
    first = read_entry(MediaCache(root).entry_path(ref.key or ""), framework="numpy")[0]
    out, _ = slow.communicate("\n", timeout=60)  # now the first one renames over it
    assert slow.returncode == 0 and "DONE" in out
    frames, info = read_entry(MediaCache(root).entry_path(ref.key or ""), framework="numpy")
    assert np.array_equal(frames, first) and info.key == ref.key
    assert not MediaCache(root).temp_files() and len(list(MediaCache(root).entry_paths())) == 1
