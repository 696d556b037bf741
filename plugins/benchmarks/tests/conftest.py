"""Fixture writers: benchmark files in their official formats, in temporary directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


class Files:
    """Writers for annotation files (the tests pass paths under ``tmp_path``)."""

    @staticmethod
    def json(path: Path, value: Any) -> Path:
        """Pretty-printed like the official releases (one key per line), so line numbers mean something."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path

    @staticmethod
    def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        return path

    @staticmethod
    def parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
        """A Parquet file as the Hugging Face releases ship them (a key a row lacks is null)."""
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        path.parent.mkdir(parents=True, exist_ok=True)
        keys = list(dict.fromkeys(k for r in rows for k in r))
        pq.write_table(pa.table({k: [r.get(k) for r in rows] for k in keys}), path)
        return path

    @staticmethod
    def touch(path: Path) -> Path:
        """A placeholder media file (scoring tests never decode videos)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
        return path


@pytest.fixture
def files() -> Files:
    return Files()
