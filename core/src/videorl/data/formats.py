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

from videorl.data.files import RAISE_HINT, max_dataset_bytes, read_regular, regular_stat
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
        import pyarrow.compute
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


class _Budget:
    """The decoded bytes of one columnar file, against :func:`~videorl.data.files.max_dataset_bytes`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.limit = max_dataset_bytes()
        self.used = 0

    def refuse(self, what: str) -> DataError:
        return DataError(f"{self.path}: {what}, over the limit of {self.limit:,} bytes; {RAISE_HINT}")

    def spend(self, n: int) -> None:
        self.used += n
        if self.used > self.limit:
            raise self.refuse(f"its rows decode to more than {self.used:,} bytes")


def _is_binary(pa: Any, t: Any) -> bool:
    tests = (pa.types.is_binary, pa.types.is_string, pa.types.is_large_binary, pa.types.is_large_string,
             pa.types.is_fixed_size_binary)  # fmt: skip
    return any(test(t) for test in tests)


def _decoded_bytes(pa: Any, array: Any) -> int:
    """The bytes ``array`` takes as Python values (8 per value, plus the length of each string or binary
    value), computed on the Arrow data: a dictionary's values are counted once per use, never copied."""
    pc, t, n = pa.compute, array.type, len(array)
    if pa.types.is_dictionary(t):
        values = array.dictionary
        if _is_binary(pa, values.type):
            return 8 * n + int(pc.sum(pc.take(pc.binary_length(values), array.indices)).as_py() or 0)
        nested = pa.types.is_nested(values.type)  # each use counted as the whole dictionary: a bound
        return 8 * n + (n * _decoded_bytes(pa, values) if nested else 0)
    if _is_binary(pa, t):
        return 8 * n + int(pc.sum(pc.binary_length(array)).as_py() or 0)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return 8 * n + _decoded_bytes(pa, array.flatten())
    if pa.types.is_struct(t):
        return 8 * n + sum(_decoded_bytes(pa, child) for child in array.flatten())
    return 8 * n


def _batches_rows(path: Path, batches: Callable[[_Budget], Iterator[Any]]) -> Iterator[tuple[str, Any]]:
    """The rows of ``batches(budget)``, read twice: a first pass measures every batch's decoded size
    against the budget (nothing converted), so that a file over it is refused before a row is built."""
    pa = _pyarrow(path)
    budget = _Budget(path)
    number = 0
    try:
        for batch in batches(budget):
            budget.spend(sum(_decoded_bytes(pa, column) for column in batch.columns))
        for batch in batches(budget):
            for row in batch.to_pylist():
                number += 1
                yield f"{path}:{number}", _not_null(row)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: cannot read the {ROW_FORMATS[path.suffix.lower()]} file ({exc})") from None
    except RecursionError:
        raise DataError(f"{path}: its columns are nested too deeply to read") from None


def parquet_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """The rows of a Parquet file. The footer's counts are checked first (at least 8 bytes per value,
    the pages' uncompressed size); string and binary columns are read dictionary-encoded, so that a
    small dictionary used by many rows is measured (:func:`_decoded_bytes`) before it is expanded."""

    def batches(budget: _Budget) -> Iterator[Any]:
        pa = _pyarrow(path)
        regular_stat(path)
        meta = pa.parquet.ParquetFile(path).metadata
        values = stored = 0
        for i in range(meta.num_row_groups):
            group = meta.row_group(i)
            values += group.num_rows
            for j in range(group.num_columns):
                values += group.column(j).num_values
                stored += group.column(j).total_uncompressed_size
        if max(8 * values, stored) > budget.limit:
            raise budget.refuse(f"it holds {values:,} values in {stored:,} bytes uncompressed")
        schema = meta.schema
        strings = [schema.column(i).path for i in range(len(schema)) if schema.column(i).physical_type
                   in ("BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY")]  # fmt: skip
        return pa.parquet.ParquetFile(path, read_dictionary=strings).iter_batches(batch_size=_BATCH)

    return _batches_rows(path, batches)


def arrow_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """The rows of an Arrow shard (``save_to_disk`` writes the IPC stream format; the file format too)."""

    def batches(budget: _Budget) -> Iterator[Any]:
        pa = _pyarrow(path)
        regular_stat(path)
        source = pa.memory_map(str(path))
        try:
            return iter(pa.ipc.open_stream(source))
        except pa.ArrowInvalid:
            reader = pa.ipc.open_file(source)
            return (reader.get_batch(i) for i in range(reader.num_record_batches))

    return _batches_rows(path, batches)


#: the most bytes of an HF dataset's metadata file (``state.json``, ``dataset_dict.json``, a hub ref)
_METADATA_LIMIT = 16 << 20
_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), "a number")


def _read_json(path: Path) -> dict[str, Any]:
    """The JSON object in the HF dataset metadata file ``path``."""
    hint = "save the dataset again"
    try:
        data = json.loads(read_regular(path, _METADATA_LIMIT, hint=hint).decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DataError(
            f"{path}: cannot read the HF dataset metadata ({exc or 'nested too deeply'})"
        ) from None
    if not isinstance(data, dict):
        raise DataError(
            f"{path}: the HF dataset metadata must be a JSON object, got {_json_type(data)}; {hint}"
        )
    return data


def _entry(folder: Path, name: Any, where: str) -> Path:
    """``folder / name`` for a name that an HF dataset's metadata gives for a file or folder directly in
    ``folder``; ``where`` (file and field) names it in the error for anything else."""
    if not isinstance(name, str) or name in ("", ".", "..") or any(c in name for c in "/\\\0"):
        shown = repr(name)[:80] if isinstance(name, str) else _json_type(name)
        raise DataError(f"{where} must name a file or folder in {folder} (a plain name), got {shown}")
    return folder / name


def _list_field(data: dict[str, Any], name: str, where: Path) -> list[Any]:
    value = data.get(name)
    if not isinstance(value, list):
        raise DataError(
            f"{where}: field {name!r} must be an array, got {_json_type(value)}; save the dataset again"
        )
    return value


def _saved_dataset(folder: Path) -> list[Path]:
    """The Arrow shards of a ``save_to_disk`` folder (a ``Dataset``, or a ``DatasetDict`` of one split)."""
    if (folder / "dataset_dict.json").is_file():
        meta = folder / "dataset_dict.json"
        splits = [
            _entry(folder, s, f"{meta}: field 'splits'")
            for s in _list_field(_read_json(meta), "splits", meta)
        ]
        if len(splits) != 1:
            names = ", ".join(p.name for p in splits) or "none"
            raise DataError(
                f"{folder}: an HF DatasetDict with the splits {names}; give one split's folder "
                f"(e.g. {splits[0] if splits else folder / 'train'})"
            )
        folder = splits[0]
    state_file = folder / "state.json"
    entries = _list_field(_read_json(state_file), "_data_files", state_file)
    files = []
    for number, entry in enumerate(entries, start=1):
        where = f"{state_file}: field '_data_files' item {number}"
        if not isinstance(entry, dict):
            raise DataError(f"{where} must be an object, got {_json_type(entry)}; save the dataset again")
        files.append(_entry(folder, entry.get("filename"), f"{where} 'filename'"))
    if not files:
        raise DataError(f"{state_file}: names no data files ('_data_files'); save the dataset again")
    return files


def _snapshot(repo: Path) -> Path:
    """The snapshot a hub-cache repository folder's ``refs/main`` points to (else its only snapshot)."""
    ref = repo / "refs" / "main"
    if ref.is_file():
        try:
            revision = (
                read_regular(ref, 4096, what="the ref", hint="download the dataset again").decode().strip()
            )
        except UnicodeDecodeError:
            raise DataError(f"{ref}: not a revision (not text); download the dataset again") from None
        snapshot = _entry(repo / "snapshots", revision, f"{ref}: the revision")
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
