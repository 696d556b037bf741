"""Bad inputs: missing directories and files, malformed rows named by file and line."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from videorl.api import DataError
from videorl_benchmarks.files import read_records, require_dir, split_inline_options
from videorl_benchmarks.lvbench import LVBench
from videorl_benchmarks.videomme import VideoMME

if TYPE_CHECKING:
    from conftest import Files


def test_missing_benchmark_directory_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"video-mme: data directory .*nowhere does not exist; download"):
        VideoMME().load(tmp_path / "nowhere")


def test_directory_without_annotation_lists_the_expected_files(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"none of videomme/\*\.parquet, .*videomme\.json found"):
        VideoMME().load(tmp_path)
    with pytest.raises(DataError, match="does not exist"):
        require_dir(tmp_path / "x", "b")


def test_json_array_rows_know_their_line(tmp_path: Path, files: Files) -> None:
    path = files.json(tmp_path / "a.json", [{"a": 1}, {"b": 2}, {"c": 3}])
    assert [r.where for r in read_records(path)] == [f"{path}:2", f"{path}:5", f"{path}:8"]


def test_malformed_row_names_file_and_line(tmp_path: Path, files: Files) -> None:
    good = {
        "question_id": "1-1", "videoID": "v", "duration": "short", "domain": "d", "sub_category": "s",
        "task_type": "t", "question": "q?", "options": ["A. x", "B. y"], "answer": "B",
    }  # fmt: skip
    bad = dict(good, question_id="1-2", answer="E")
    files.jsonl(tmp_path / "videomme" / "test.jsonl", [good, bad])
    with pytest.raises(DataError, match=r"test\.jsonl:2: answer 'E' is not one of the 2 option letters"):
        VideoMME().load(tmp_path)
    missing_field = {k: v for k, v in good.items() if k != "question"}
    files.jsonl(tmp_path / "videomme" / "test.jsonl", [good, missing_field])
    with pytest.raises(DataError, match=r"test\.jsonl:2: field 'question' is missing"):
        VideoMME().load(tmp_path)


def test_invalid_json_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "video_info.meta.jsonl").write_text('{"key": "a", "qa": []}\n{"key": oops}\n')
    with pytest.raises(DataError, match=r"video_info\.meta\.jsonl:2: not valid JSON"):
        LVBench().load(tmp_path)
    path = tmp_path / "t.json"
    path.write_text('[\n  {"a": 1},\n  {"a": 2\n')
    with pytest.raises(DataError, match=r"t\.json:\d+: not valid JSON|unexpected end"):
        read_records(path)
    path.write_text('[\n  {"a": 1},\n  3\n]')
    with pytest.raises(DataError, match=r"t\.json:3: item 1 is int"):
        read_records(path)


def test_duplicate_ids_are_refused(tmp_path: Path, files: Files) -> None:
    row = {
        "question_id": "1-1", "videoID": "v", "duration": "short", "domain": "d", "sub_category": "s",
        "task_type": "t", "question": "q?", "options": ["A. x", "B. y"], "answer": "B",
    }  # fmt: skip
    files.jsonl(tmp_path / "videomme" / "test.jsonl", [row, row])
    with pytest.raises(DataError, match="'1-1' appears twice"):
        VideoMME().load(tmp_path)


def test_parquet_files_are_read_when_pyarrow_is_installed(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "x.parquet"
    pq.write_table(pa.Table.from_pylist([{"a": 1}, {"a": 2}]), path)
    assert [r.data for r in read_records(path)] == [{"a": 1}, {"a": 2}]
    assert read_records(path)[1].where == f"{path}: row 1"


def test_split_inline_options() -> None:
    stem, options = split_inline_options("What happens?\n(A) a cat\n(B) a dog\n  that barks\n(C) nothing")
    assert stem == "What happens?"
    assert options == ["a cat", "a dog that barks", "nothing"]
    assert split_inline_options("No options here") == ("No options here", [])
