"""``results.json`` has one writer, :mod:`videorl.eval.results`, and one format literal."""

from __future__ import annotations

import json
from pathlib import Path

import videorl
from videorl.eval.results import FORMAT, begin_run, write_timing


def test_begin_run_and_timing_write_one_format(tmp_path: Path) -> None:
    begin_run(tmp_path, {"model": {"path": "/m"}, "benchmarks": {"a": {"data_root": "/a"}}})
    write_timing(tmp_path, {"wall_s": 1.5})
    data = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert data == {
        "format": "videorl-eval/1",
        "settings": {"model": {"path": "/m"}, "benchmarks": {"a": {"data_root": "/a"}}},
        "benchmarks": {},
        "timing": {"wall_s": 1.5},
    }


def test_the_format_literal_is_written_in_one_module() -> None:
    root = Path(videorl.__file__).parent
    holders = sorted(
        str(p.relative_to(root)) for p in root.rglob("*.py") if FORMAT in p.read_text(encoding="utf-8")
    )
    assert holders == ["eval/results.py"]
