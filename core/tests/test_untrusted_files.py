"""Hostile dataset files: FIFOs and devices named as media or data, columnar files that expand hugely,
HF dataset metadata of the wrong JSON types, and images over the pixel limit. Each is refused with one
line naming the file (and the field), before anything blocks, reads or allocates."""

from __future__ import annotations

import json
import os
import struct
import time
import zlib
from pathlib import Path

import pytest

from videorl.data import load_samples, read_rows
from videorl.data.files import DEFAULT_MAX_DATASET_BYTES
from videorl.data.images import MAX_IMAGE_PIXELS, check_image
from videorl.errors import DataError
from videorl.media import DecodeParams, ImageParams, MediaError, build_cache, decode_image, decode_video
from videorl.media.fingerprint import fingerprint

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("PIL")

PARAMS = DecodeParams(factor=28, temporal_patch_size=2)


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.mp4"
    os.mkfifo(path)
    return path


# --- only regular files are read (a FIFO blocks an open for ever, /dev/zero never ends) -------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["fifo", "zero", "urandom"])
def test_fingerprint_and_decoding_refuse_what_is_not_a_regular_file(
    kind: str, fifo: Path, tmp_path: Path
) -> None:
    path = fifo if kind == "fifo" else Path(f"/dev/{kind}")
    what = "a FIFO (named pipe)" if kind == "fifo" else "a character device"
    expected = f"{path}: {what}, not a regular file; only regular files are read"
    for read in (
        lambda: fingerprint(path, tmp_path / "memo"),
        lambda: decode_video(path, PARAMS),
        lambda: decode_image(path, ImageParams(factor=28)),
    ):
        with pytest.raises(MediaError) as exc:
            read()
        assert _one_line(exc) == expected


@pytest.mark.timeout(30)
def test_a_dataset_file_that_is_a_fifo_or_a_device_is_refused(fifo: Path, tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    data.symlink_to("/dev/zero")
    with pytest.raises(DataError, match=r"rows\.jsonl: a character device, not a regular file"):
        list(read_rows(data))
    listed = tmp_path / "videos.txt"
    os.mkfifo(listed)
    with pytest.raises(DataError, match=r"videos\.txt: a FIFO \(named pipe\), not a regular file"):
        load_samples(listed)


@pytest.mark.timeout(60)
def test_cache_build_reports_fifo_and_device_videos_and_builds_the_rest(
    fifo: Path, tmp_path: Path, make_clip: object
) -> None:
    good = make_clip("good.mp4", frames=8)  # type: ignore[operator]
    data = tmp_path / "data.jsonl"
    rows = [
        {"problem_id": str(i), "problem": "", "videos": [v]}
        for i, v in enumerate([str(good), str(fifo), "/dev/zero"])
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = load_samples(data, require_answer=False)
    report = build_cache([v for s in samples for v in s.videos], PARAMS, tmp_path / "cache", progress=False)
    assert sorted(report.refs) == [str(good)]
    assert {(f.video, f.stage, f.reason) for f in report.failures} == {
        (
            "/dev/zero",
            "fingerprint",
            "/dev/zero: a character device, not a regular file; only regular files are read",
        ),
        (
            str(fifo),
            "fingerprint",
            f"{fifo}: a FIFO (named pipe), not a regular file; only regular files are read",
        ),
    }


@pytest.mark.timeout(30)
def test_a_playlist_with_network_segments_is_still_refused(tmp_path: Path) -> None:
    playlist = tmp_path / "remote.m3u8"
    playlist.write_text(
        "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\nhttp://127.0.0.1:9/a.ts\n#EXT-X-ENDLIST\n"
    )
    with pytest.raises(MediaError, match=r"remote\.m3u8: not a media file FFmpeg can read"):
        decode_video(playlist, PARAMS)


# --- columnar files whose values expand past the budget ---------------------------------------------


def test_a_small_parquet_whose_dictionary_expands_hugely_is_refused_from_its_sizes(tmp_path: Path) -> None:
    # one 1 MiB string, used by 5,000 rows: 5 GiB once expanded, from a file of a few KB
    rows = 5000
    column = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["a" * (1 << 20)]))
    path = tmp_path / "bomb.parquet"
    pq.write_table(pa.table({"problem": column, "answer": ["1"] * rows}), path, compression="zstd")
    assert path.stat().st_size < 20_000
    start = time.monotonic()
    with pytest.raises(DataError) as exc:
        load_samples(path)
    # batches of 1,024 rows, each (8 + 1 MiB) + (8 + 1) bytes a row: the fourth passes 4 GiB
    assert _one_line(exc) == (
        f"{path}: its rows decode to more than {4 * 1024 * ((1 << 20) + 17):,} bytes, over the limit of "
        f"{DEFAULT_MAX_DATASET_BYTES:,} bytes; raise the limit with VIDEORL_MAX_DATASET_BYTES=BYTES if the "
        "file is genuine, or split it"
    )
    assert time.monotonic() - start < 20  # measured on the dictionary, never expanded


def test_the_parquet_footer_counts_are_checked_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "many.parquet"
    pq.write_table(pa.table({"problem": ["q"] * 100, "answer": ["1"] * 100, "n": list(range(100))}), path)
    monkeypatch.setenv("VIDEORL_MAX_DATASET_BYTES", "2000")
    # 100 rows + 300 values, counted at 8 bytes each: 3,200 bytes
    with pytest.raises(DataError) as exc:
        load_samples(path)
    assert _one_line(exc).startswith(f"{path}: it holds 400 values in ")
    assert "over the limit of 2,000 bytes; raise the limit with VIDEORL_MAX_DATASET_BYTES" in str(exc.value)
    monkeypatch.setenv("VIDEORL_MAX_DATASET_BYTES", "100000")
    assert len(load_samples(path)) == 100  # raised: read as before


def test_an_arrow_shard_with_a_dictionary_bomb_is_refused(tmp_path: Path) -> None:
    rows = 5000
    column = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["b" * (1 << 20)]))
    table = pa.table({"problem": column, "answer": ["1"] * rows})
    path = tmp_path / "data-00000-of-00001.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    with pytest.raises(DataError, match=r"its rows decode to more than [\d,]+ bytes, over the limit"):
        load_samples(path)


def test_the_decoded_size_is_counted_exactly_without_expanding() -> None:
    from videorl.data.formats import _decoded_bytes

    strings = pa.array(["abc", "de", None])
    assert _decoded_bytes(pa, strings) == 3 * 8 + 5
    lists = pa.array([["wxyz", "wxyz"], [], None], pa.list_(pa.string()))
    assert _decoded_bytes(pa, lists) == 3 * 8 + 2 * 8 + 8
    used = pa.DictionaryArray.from_arrays(pa.array([1, 1, None, 0], pa.int32()), pa.array(["a", "bcdefg"]))
    assert _decoded_bytes(pa, used) == 4 * 8 + 6 + 6 + 1  # each use of a value counted
    structs = pa.array([{"bytes": b"12345", "path": "p.png"}, None])
    assert _decoded_bytes(pa, structs) == 2 * 8 + (2 * 8 + 5) + (2 * 8 + 5)
    assert _decoded_bytes(pa, lists.slice(1)) == 2 * 8  # a slice counts its own rows only


def test_a_json_dataset_over_the_limit_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"problem": "q" * 200, "answer": "1"}) + "\n")
    monkeypatch.setenv("VIDEORL_MAX_DATASET_BYTES", "100")
    with pytest.raises(DataError) as exc:
        load_samples(path)
    assert _one_line(exc).startswith(f"{path}: the dataset file is 231 bytes, over the limit of 100;")


# --- HF dataset metadata of the wrong JSON types ----------------------------------------------------


_NAME_IN = "must name a file or folder in {d} (a plain name), got"


@pytest.mark.parametrize(
    ("file", "content", "message"),
    [
        ("dataset_dict.json", [], "the HF dataset metadata must be a JSON object, got an array"),
        ("dataset_dict.json", {"splits": "train"}, "field 'splits' must be an array, got a string"),
        ("dataset_dict.json", {"splits": [7]}, f"field 'splits' {_NAME_IN} a number"),
        ("dataset_dict.json", {"splits": ["../.."]}, f"field 'splits' {_NAME_IN} '../..'"),
        ("state.json", "x", "the HF dataset metadata must be a JSON object, got a string"),
        ("state.json", {"_data_files": {"a": 1}}, "field '_data_files' must be an array, got an object"),
        ("state.json", {"_data_files": [3]}, "field '_data_files' item 1 must be an object, got a number"),
        ("state.json", {"_data_files": [{}]}, f"field '_data_files' item 1 'filename' {_NAME_IN} null"),
        ("state.json", {"_data_files": [{"filename": "/etc/x"}]}, f"item 1 'filename' {_NAME_IN} '/etc/x'"),
    ],
)  # fmt: skip
def test_hf_metadata_of_the_wrong_types_is_one_error_naming_file_and_field(
    tmp_path: Path, file: str, content: object, message: str
) -> None:
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / file).write_text(json.dumps(content))
    with pytest.raises(DataError) as exc:
        load_samples(folder)
    assert _one_line(exc).startswith(f"{folder / file}: ")
    assert _one_line(exc).endswith(message.format(d=folder)) or message.format(d=folder) + ";" in str(
        exc.value
    )


def test_a_hub_ref_outside_the_snapshots_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "datasets--org--name"
    (repo / "refs").mkdir(parents=True)
    (repo / "snapshots" / "abc").mkdir(parents=True)
    (repo / "refs" / "main").write_text("../../elsewhere\n")
    with pytest.raises(DataError) as exc:
        load_samples(repo)
    assert _one_line(exc) == (
        f"{repo}/refs/main: the revision must name a file or folder in {repo}/snapshots (a plain name), "
        "got '../../elsewhere'"
    )


# --- one pixel limit for every image, checked from the header ---------------------------------------


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header says ``width × height`` (its pixel data is a few bytes: never decoded)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize(
    ("side", "limit"),
    [
        (12000, f"the image is 12000×12000 (144000000 pixels), over the limit of {MAX_IMAGE_PIXELS}"),
        # past twice the limit Pillow refuses from the header itself, without the width
        (16000, f"the image is larger (256000000 pixels) than the limit of {MAX_IMAGE_PIXELS} pixels"),
    ],
)
def test_an_image_by_path_gets_the_pixel_limit_of_an_image_given_as_bytes(
    tmp_path: Path, side: int, limit: str
) -> None:
    data = _png_header(side, side)
    with pytest.raises(DataError) as exc:
        check_image(data, "row 1")
    assert _one_line(exc) == f"row 1: {limit}; resize it in the dataset"
    path = tmp_path / "huge.png"
    path.write_bytes(data)
    start = time.monotonic()
    with pytest.raises(MediaError) as exc:
        decode_image(path, ImageParams(factor=28))
    assert _one_line(exc) == f"{path}: {limit}; resize it in the dataset"
    assert time.monotonic() - start < 1.0  # from the header: no 1 GB decode


def test_an_image_within_the_limit_still_decodes(tmp_path: Path) -> None:
    from PIL import Image

    path = tmp_path / "ok.png"
    Image.new("RGB", (64, 48), (200, 10, 10)).save(path)
    pixels, meta = decode_image(path, ImageParams(factor=16, min_pixels=256, max_pixels=64 * 48))
    assert (meta.source_width, meta.source_height) == (64, 48) and pixels.shape[0] == 3
