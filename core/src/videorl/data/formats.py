"""Dataset files as the ecosystem ships them: JSON/JSONL, Parquet, Arrow, and Hugging Face dataset folders.

Every format yields ``(where, row)`` pairs, ``where`` being ``file:row`` (rows numbered from 1; the line
for JSON), so that the schema checks of :mod:`videorl.data.loaders` report the same way for all of them.
A folder is an HF dataset when it was written by ``Dataset.save_to_disk`` (``state.json`` and Arrow
shards; a ``DatasetDict``'s ``dataset_dict.json`` with one folder per split), is a hub-cache repository
(``datasets--org--name`` with ``refs/`` and ``snapshots/``), or holds data files (``*.parquet``, else
``*.jsonl``/``*.json``, as ``load_dataset`` on a local path reads them). Only local files are read, so
offline mode holds by construction. Parquet and Arrow need ``pyarrow``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

from videorl.errors import DataError

#: suffix → the format's name, for the error listing what can be read
ROW_FORMATS = {
    ".json": "JSON",
    ".jsonl": "JSON lines",
    ".parquet": "Parquet",
    ".arrow": "Arrow (an HF dataset shard)",
}
_SPLITS = ("train", "validation", "valid", "dev", "test", "eval")
_SPLIT_OF = re.compile(r"^(" + "|".join(_SPLITS) + r")(?:[-_.]|$)")
_BATCH = 1024


def _pyarrow(path: Path) -> Any:
    try:
        import pyarrow
        import pyarrow.ipc  # the submodules used below
        import pyarrow.parquet
    except ImportError:
        raise DataError(
            f"{path}: reading {ROW_FORMATS.get(path.suffix.lower(), 'Arrow')} needs pyarrow: "
            "pip install 'videorl[data]' (or pyarrow), or convert the rows to JSON lines"
        ) from None
    return pyarrow


def _not_null(row: dict[str, Any]) -> dict[str, Any]:
    # a column a row lacks is null in a columnar file; a JSON row would simply not have the key
    return {k: v for k, v in row.items() if v is not None}


def _batches_rows(path: Path, batches: Callable[[], Iterator[Any]]) -> Iterator[tuple[str, Any]]:
    pa = _pyarrow(path)
    number = 0
    try:
        for batch in batches():
            for row in batch.to_pylist():
                number += 1
                yield f"{path}:{number}", _not_null(row)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: cannot read the {ROW_FORMATS[path.suffix.lower()]} file ({exc})") from None


def parquet_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """The rows of a Parquet file."""

    def batches() -> Iterator[Any]:
        pa = _pyarrow(path)
        return pa.parquet.ParquetFile(path).iter_batches(batch_size=_BATCH)

    return _batches_rows(path, batches)


def arrow_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """The rows of an Arrow shard (``save_to_disk`` writes the IPC stream format; the file format too)."""

    def batches() -> Iterator[Any]:
        pa = _pyarrow(path)
        source = pa.memory_map(str(path))
        try:
            return iter(pa.ipc.open_stream(source))
        except pa.ArrowInvalid:
            reader = pa.ipc.open_file(source)
            return (reader.get_batch(i) for i in range(reader.num_record_batches))

    return _batches_rows(path, batches)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: cannot read the HF dataset metadata ({exc})") from None


def _saved_dataset(folder: Path) -> list[Path]:
    """The Arrow shards of a ``save_to_disk`` folder (a ``Dataset``, or a ``DatasetDict`` of one split)."""
    if (folder / "dataset_dict.json").is_file():
        splits = _read_json(folder / "dataset_dict.json").get("splits") or []
        if len(splits) != 1:
            names = ", ".join(map(str, splits)) or "none"
            raise DataError(
                f"{folder}: an HF DatasetDict with the splits {names}; give one split's folder "
                f"(e.g. {folder / str(splits[0] if splits else 'train')})"
            )
        folder = folder / str(splits[0])
    state = _read_json(folder / "state.json")
    files = [folder / str(f.get("filename", "")) for f in state.get("_data_files", []) if isinstance(f, dict)]
    if not files:
        raise DataError(f"{folder}/state.json: names no data files ('_data_files'); save the dataset again")
    return files


def _snapshot(repo: Path) -> Path:
    """The snapshot a hub-cache repository folder's ``refs/main`` points to (else its only snapshot)."""
    ref = repo / "refs" / "main"
    if ref.is_file():
        snapshot = repo / "snapshots" / ref.read_text().strip()
        if snapshot.is_dir():
            return snapshot
    snapshots = sorted(p for p in (repo / "snapshots").iterdir() if p.is_dir())
    if len(snapshots) != 1:
        raise DataError(
            f"{repo}: a hub-cache repository with {len(snapshots)} snapshots and no refs/main; "
            f"give the snapshot's folder ({repo / 'snapshots' / '<revision>'})"
        )
    return snapshots[0]


def _split(path: Path, folder: Path) -> str | None:
    for part in path.relative_to(folder).parts:
        match = _SPLIT_OF.match(part.lower())
        if match:
            return match.group(1)
    return None


def dataset_files(folder: Path, videos: Collection[str]) -> tuple[Path, list[Path]] | None:
    """``(base, row files)`` of an HF dataset folder, or None when ``folder`` is not one (a folder of
    videos: suffixes in ``videos``); ``base`` (the folder, or the snapshot of a hub-cache repository) is where
    relative media paths start."""
    if (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file():
        return folder, _saved_dataset(folder)
    if (folder / "snapshots").is_dir():
        folder = _snapshot(folder)
    files = [p for p in sorted(folder.rglob("*")) if p.is_file() and not any(
        s.startswith(".") for s in p.relative_to(folder).parts)]  # fmt: skip
    found: list[Path] = []
    for suffixes in ((".parquet",), (".arrow",), (".jsonl", ".json")):
        found = [p for p in files if p.suffix.lower() in suffixes]
        if found:
            break
    # a folder of videos with a JSON file beside them stays a folder of videos, as before
    if not found or (
        found[0].suffix.lower() in (".jsonl", ".json") and any(p.suffix.lower() in videos for p in files)
    ):
        return None
    splits = {_split(p, folder) for p in found}
    if len(splits) > 1:
        names = ", ".join(sorted(s or "(none)" for s in splits))
        raise DataError(
            f"{folder}: an HF dataset with the splits {names}; give one split's file or folder "
            f"(e.g. {next(p for p in found if _split(p, folder) == sorted(s for s in splits if s)[0])})"
        )
    return folder, found


def unsupported(path: Path) -> DataError:
    """The error for a dataset file of a format nobody reads, listing those that are read."""
    known = ", ".join(f"{name} ({suffix})" for suffix, name in ROW_FORMATS.items())
    return DataError(
        f"{path}: unsupported dataset format {path.suffix or '(no suffix)'!r}; videorl reads {known}, "
        "an HF dataset folder (save_to_disk or the hub-cache layout), video lists (.txt, .lst), a video "
        "file or a folder of videos"
    )
