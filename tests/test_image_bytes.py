"""Images given as bytes (the ``datasets`` ``Image`` feature) through the data path: a dataset saved with
``save_to_disk`` and exported to Parquet trains through the CLI and goes through ``cache build``; a corrupt
or oversized image is rejected naming its row and column."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from videorl import demo
from videorl.data import load_samples
from videorl.data.images import MAX_IMAGE_PIXELS
from videorl.errors import DataError
from videorl.plugins import load_plugins
from videorl.rewards.types import RewardInput
from videorl.runs.history import read_metrics
from videorl.testing import CliResult

RunCli = Callable[..., CliResult]
datasets = pytest.importorskip("datasets")
Image = pytest.importorskip("PIL.Image")


def _png(size: tuple[int, int], colour: str) -> bytes:
    picture = Image.new("RGB", size, (10, 10, 10))
    picture.paste(demo.COLOURS[colour], (8, 8, 8 + demo.SQUARE, 8 + demo.SQUARE))
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width × height`` pixels (a decompression bomb's shape), with no pixels."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
    )


def _dataset(images: list[list[bytes]]) -> object:
    rows = {
        "problem_id": [f"bytes-{i}" for i in range(len(images))],
        "problem": ["<image><image>Which colour is in the first picture?"] * len(images),
        "problem_type": ["multiple choice"] * len(images),
        "options": [demo.OPTIONS] * len(images),
        "answer": ["A"] * len(images),
        "offline_output": ["<answer>A</answer>"] * len(images),
        "images": [[{"bytes": b, "path": None} for b in row] for row in images],
    }
    features = datasets.Features(
        {
            **{k: datasets.Value("string") for k in rows if k not in ("options", "images")},
            "options": datasets.Sequence(datasets.Value("string")),
            "images": datasets.Sequence(datasets.Image()),
        }
    )
    return datasets.Dataset.from_dict(rows, features=features)


@pytest.fixture()
def image_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "images"
    monkeypatch.setenv("VIDEORL_IMAGE_DIR", str(folder))
    return folder


@pytest.mark.slow
def test_image_bytes_from_save_to_disk_and_parquet_train_two_steps_through_the_cli(
    tmp_path: Path, image_dir: Path
) -> None:
    red, blue = _png((84, 56), "red"), _png((56, 84), "blue")
    dataset = _dataset([[red, blue], [blue, red]])
    dataset.save_to_disk(str(tmp_path / "saved"))
    dataset.to_parquet(str(tmp_path / "train.parquet"))

    saved, parquet = load_samples(tmp_path / "saved"), load_samples(tmp_path / "train.parquet")
    assert [s.images for s in saved] == [s.images for s in parquet]  # one file per distinct image
    first, second = saved
    assert first.data_type == "image" and first.images == second.images[::-1]
    assert [Path(p).read_bytes() for p in first.images] == [red, blue]
    assert all(Path(p).parent.parent == image_dir and p.endswith(".png") for p in first.images)
    assert sorted(p.name for p in image_dir.rglob("*.png")) == sorted(Path(p).name for p in first.images)

    model, train, val = demo.prepare(tmp_path, load_plugins(), family="qwen2_5_vl", seed=0, train=2, val=1)
    config = tmp_path / "train.yaml"
    config.write_text("")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VIDEORL_IMAGE_DIR": str(image_dir)}
    for name, data in (("saved", tmp_path / "saved"), ("parquet", tmp_path / "train.parquet")):
        run = tmp_path / f"run-{name}"
        overrides = [*demo.demo_overrides(tmp_path, model, train, val, steps=2, seed=3, engine="hf"),
                     f"output_dir={run}", f"data.train_files=[{data}]", "data.val_files=[]",
                     "data.rollout_batch_size=2", "actor.global_batch_size=2", "rollout.n=2",
                     "trainer.progress_bar=false", "trainer.val_every=0",
                     "trainer.loggers=[jsonl]"]  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "videorl.cli", "train", str(config), *overrides],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        rows = read_metrics(run / "metrics.jsonl")
        assert [r["step"] for r in rows] == [1, 2]
        assert all(0.0 <= r["reward/overall"] <= 1.0 and r["actor/grad_norm"] is not None for r in rows)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (b"\x89PNG\r\n\x1a\n" + b"\0" * 40, "not an image \\(no format Pillow reads\\)"),
        (_png((84, 56), "red")[:-60], "not a readable image"),  # truncated inside the pixel data
        (
            _png_header(10_000, 10_000),
            f"10000×10000 \\(100000000 pixels\\), over the limit of {MAX_IMAGE_PIXELS}",
        ),
        (_png_header(20_000, 20_000), f"larger \\(400000000 pixels\\) than the limit of {MAX_IMAGE_PIXELS}"),
    ],
)
def test_a_corrupt_or_oversized_image_names_its_row_and_column(
    tmp_path: Path, image_dir: Path, bad: bytes, message: str
) -> None:
    good = _png((84, 56), "red")
    _dataset([[good, good], [good, bad]]).to_parquet(str(tmp_path / "train.parquet"))
    with pytest.raises(DataError, match=message) as info:
        load_samples(tmp_path / "train.parquet")
    assert str(info.value).startswith(f"{tmp_path / 'train.parquet'}:2: 'images' (item 2): ")
    assert len(list(image_dir.rglob("*.png"))) == 1  # the bad image is never written
    errors: list[DataError] = []
    assert [s.id for s in load_samples(tmp_path / "train.parquet", errors=errors)] == ["bytes-0"]
    assert [str(e) for e in errors] == [str(info.value)]


def test_a_path_only_image_struct_names_a_file_and_video_bytes_are_refused(
    tmp_path: Path, image_dir: Path
) -> None:
    Image.new("RGB", (32, 32)).save(tmp_path / "a.png")
    row = {"problem": "Q", "answer": "A", "image": {"bytes": None, "path": "a.png"}}
    datasets.Dataset.from_list([row]).to_parquet(str(tmp_path / "rows.parquet"))
    (sample,) = load_samples(tmp_path / "rows.parquet")
    assert sample.images == [str(tmp_path / "a.png")] and sample.data_type == "image"
    # a row that is only scored (videorl reward) reads no media: its image bytes are neither checked nor
    # written
    scored = {"problem_type": "multiple choice", "answer": "A", "images": [{"bytes": b"junk", "path": None}]}
    reward = RewardInput.from_sample(scored, "<answer>A</answer>")
    assert reward.data_type == "image" and not (tmp_path / "images").exists()
    bad = {"problem": "Q", "answer": "A", "videos": [b"\0\0"]}
    datasets.Dataset.from_list([bad]).to_parquet(str(tmp_path / "video.parquet"))
    with pytest.raises(DataError, match="'videos' must be a path .* videos are read from files only"):
        load_samples(tmp_path / "video.parquet")


def test_cache_build_reads_image_bytes_rows_and_reports_a_corrupt_one(
    run_cli: RunCli, tmp_path: Path, image_dir: Path
) -> None:
    good = _png((84, 56), "red")
    data = tmp_path / "train.parquet"
    _dataset([[good, good], [good, good[:-60]]]).to_parquet(str(data))
    result = run_cli("cache", "build", str(data), "--cache-dir", str(tmp_path / "cache"), "--factor", "28")
    assert result.exit_code == 1, result.output + result.stderr
    assert "FAILED: 0 videos, 1 dataset rows or files" in result.stderr
    lines = (tmp_path / "cache" / "build-failures.jsonl").read_text().splitlines()
    (failure,) = [json.loads(line) for line in lines]
    assert failure["where"] == f"{data}:2" and failure["stage"] == "dataset"
    assert failure["reason"].startswith(f"{data}:2: 'images' (item 2): not a readable image")
    assert len(list(image_dir.rglob("*.png"))) == 1  # the good row's image, written once
