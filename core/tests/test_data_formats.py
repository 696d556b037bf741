"""Datasets as the ecosystem ships them: Parquet, Arrow, ``save_to_disk`` folders and the hub-cache layout,
read into the same samples as JSON lines, with the same ``file:row`` errors."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from videorl.data import Sample, load_samples
from videorl.errors import DataError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ROWS: list[dict[str, Any]] = [
    {"problem_id": "a", "problem": "<video>How many?", "answer": "3", "videos": ["clips/a.mp4"],
     "data_type": "video", "problem_type": "numerical", "data_source": "X"},
    {"problem_id": "b", "problem": "Which?", "answer": "B", "options": ["A. one", "B. two"],
     "problem_type": "multiple choice"},
    {"problem_id": "c", "problem": "<image>What colour?", "answer": "red",
     "images": ["img/c.png", "img/d.png"],
     "data_type": "image", "problem_type": "free-form"},
]  # fmt: skip


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Rows as columns, a key a row lacks being null (as in HF exports)."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return {k: [r.get(k) for r in rows] for k in keys}


def _parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(_columns(rows)), path)
    return path


def _same_but_origin(samples: list[Sample], expected: list[Sample]) -> None:
    assert [replace(s, origin="") for s in samples] == [replace(s, origin="") for s in expected]


def test_parquet_rows_are_the_samples_of_the_same_jsonl(tmp_path: Path) -> None:
    expected = load_samples(_jsonl(tmp_path / "train.jsonl", ROWS))
    data = _parquet(tmp_path / "train.parquet", ROWS)
    samples = load_samples(data)
    _same_but_origin(samples, expected)
    assert samples[2].images == [str(tmp_path / "img/c.png"), str(tmp_path / "img/d.png")]
    assert samples[1].options == ["A. one", "B. two"] and samples[1].videos == []  # nulls read as absent
    assert [s.origin for s in samples] == [f"{data}:{n}" for n in (1, 2, 3)]


def test_a_bad_parquet_row_is_named_by_file_and_row(tmp_path: Path) -> None:
    data = _parquet(tmp_path / "train.parquet", [*ROWS, {"problem_id": "d", "answer": "x"}])
    with pytest.raises(DataError, match=rf"^{data}:4: missing the question"):
        load_samples(data)
    errors: list[DataError] = []
    assert [s.id for s in load_samples(data, errors=errors)] == ["a", "b", "c"]
    assert [getattr(e, "where", None) for e in errors] == [f"{data}:4"]


def test_a_corrupt_parquet_file_is_a_data_error(tmp_path: Path) -> None:
    bad = tmp_path / "train.parquet"
    bad.write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match=rf"^{bad}: cannot read the Parquet file"):
        load_samples(bad)


def test_an_unsupported_format_lists_the_formats_read(tmp_path: Path) -> None:
    csv = tmp_path / "train.csv"
    csv.write_text("problem,answer\nq,a\n")
    with pytest.raises(DataError, match=r"unsupported dataset format '\.csv'; videorl reads JSON \(\.json\), "
                       r"JSON lines \(\.jsonl\), Parquet \(\.parquet\), Arrow"):  # fmt: skip
        load_samples(csv)


def test_parquet_without_pyarrow_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _parquet(tmp_path / "train.parquet", ROWS)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    with pytest.raises(DataError, match=r"reading Parquet needs pyarrow: pip install 'videorl\[data\]'"):
        load_samples(data)


def test_save_to_disk_folders(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    expected = load_samples(_jsonl(tmp_path / "train.jsonl", ROWS))
    datasets.Dataset.from_dict(_columns(ROWS)).save_to_disk(str(tmp_path / "saved"))
    samples = load_samples(tmp_path / "saved")
    assert [s.id for s in samples] == ["a", "b", "c"]
    assert samples[0].videos == [str(tmp_path / "saved" / "clips/a.mp4")]  # relative to the dataset folder
    assert samples[0].origin == f"{tmp_path / 'saved' / 'data-00000-of-00001.arrow'}:1"
    _same_but_origin(load_samples(tmp_path / "saved", media_root=tmp_path), expected)

    both = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(_columns(ROWS)),
            "test": datasets.Dataset.from_dict(_columns(ROWS[:1])),
        }
    )
    both.save_to_disk(str(tmp_path / "dict"))
    with pytest.raises(
        DataError, match=r"an HF DatasetDict with the splits train, test; give one split's folder"
    ):
        load_samples(tmp_path / "dict")
    assert [s.id for s in load_samples(tmp_path / "dict" / "test")] == ["a"]


def _hub_repo(hf_home: Path, rows: list[dict[str, Any]], test_rows: list[dict[str, Any]]) -> Path:
    """``datasets--org--name`` as the hub cache keeps it: refs/main →
    snapshots/<rev>/data/<split>-*.parquet."""
    repo = hf_home / "hub" / "datasets--org--vqa"
    snapshot = repo / "snapshots" / "0123abcd"
    table = pa.table(_columns(rows))  # shards of one split share its schema
    (snapshot / "data").mkdir(parents=True)
    pq.write_table(table.slice(0, 2), snapshot / "data" / "train-00000-of-00002.parquet")
    pq.write_table(table.slice(2), snapshot / "data" / "train-00001-of-00002.parquet")
    if test_rows:
        _parquet(snapshot / "data" / "test-00000-of-00001.parquet", test_rows)
    (snapshot / "README.md").write_text("---\nlicense: mit\n---\n")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    return repo


def test_the_hub_cache_layout_reads_as_load_dataset_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    repo = _hub_repo(tmp_path / "hf", ROWS, [])
    snapshot = repo / "snapshots" / "0123abcd"
    samples = load_samples(repo)
    assert [s.id for s in samples] == ["a", "b", "c"]
    assert samples[2].origin == f"{snapshot / 'data' / 'train-00001-of-00002.parquet'}:1"
    assert samples[0].videos == [str(snapshot / "clips/a.mp4")]
    official = datasets.load_dataset(str(snapshot), split="train")  # the same rows, offline
    assert [r["problem_id"] for r in official] == [s.id for s in samples]
    _same_but_origin(load_samples(snapshot), samples)


def test_a_hub_dataset_with_several_splits_asks_for_one(tmp_path: Path) -> None:
    repo = _hub_repo(tmp_path / "hf", ROWS, [{**ROWS[0], "problem_id": "t"}])
    data = repo / "snapshots" / "0123abcd" / "data"
    with pytest.raises(
        DataError, match=r"an HF dataset with the splits test, train; give one split's file or folder"
    ):
        load_samples(repo)
    assert [s.id for s in load_samples(data / "test-00000-of-00001.parquet")] == ["t"]


def test_a_folder_of_videos_with_a_json_beside_stays_a_folder_of_videos(tmp_path: Path) -> None:
    (tmp_path / "a.mp4").write_bytes(b"")
    (tmp_path / "meta.json").write_text("{}")
    assert [s.id for s in load_samples(tmp_path)] == ["a.mp4"]
    _jsonl(tmp_path / "rows" / "train.jsonl", ROWS)
    assert [s.id for s in load_samples(tmp_path / "rows")] == ["a", "b", "c"]  # a folder of data files


def test_cache_build_reads_parquet_and_reports_rows(run_cli: Any, make_clip: Any, tmp_path: Path) -> None:
    make_clip("clips/a.mp4", frames=8)
    rows = [ROWS[0], {"problem_id": "bad", "answer": "x"}]
    data = _parquet(tmp_path / "train.parquet", rows)
    result = run_cli(
        "cache", "build", str(data), "--cache-dir", str(tmp_path / "cache"), "--factor", "28", "--quiet"
    )
    assert result.exit_code == 1, result.output + result.stderr
    assert "1 of 1 videos cached" in result.output
    (failure,) = [
        json.loads(line) for line in (tmp_path / "cache" / "build-failures.jsonl").read_text().splitlines()
    ]
    assert failure["where"] == f"{data}:2" and "missing the question" in failure["reason"]


def test_read_rows_numbers_parquet_rows_and_refuses_a_folder(tmp_path: Path) -> None:
    from videorl.data import read_rows

    data = _parquet(tmp_path / "train.parquet", ROWS)
    assert [(n, r["problem_id"]) for n, r in read_rows(data)] == [(1, "a"), (2, "b"), (3, "c")]
    with pytest.raises(DataError, match=rf"^{tmp_path}: a folder, where one dataset file is read here"):
        list(read_rows(tmp_path))
