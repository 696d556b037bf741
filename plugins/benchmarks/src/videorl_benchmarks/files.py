"""Reading benchmark files: JSON, JSONL and Parquet rows that know where they came from.

Every record carries ``where`` (``file:line`` for JSON and JSONL, ``file: row N`` for Parquet), so
that a malformed annotation raises a :class:`DataError` naming its file and line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from videorl.api import DataError

_DOCS = "docs/benchmarks.md"


@dataclass
class Record:
    """One annotation object and where it was read."""

    data: dict[str, Any]
    where: str

    def error(self, message: str) -> DataError:
        return DataError(f"{self.where}: {message}")

    def has(self, key: str) -> bool:
        return self.data.get(key) not in (None, "")

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def text(self, key: str) -> str:
        """A required non-empty string field (numbers are accepted and turned into strings)."""
        value = self.data.get(key)
        if isinstance(value, bool) or not isinstance(value, (str, int, float)) or str(value).strip() == "":
            raise self.error(
                f"field {key!r} is missing or not a non-empty string (keys: {sorted(self.data)})"
            )
        return str(value)

    def number(self, key: str) -> float:
        value = self.data.get(key)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise self.error(f"field {key!r} is missing or not a number (got {value!r})")

    def items(self, key: str) -> list[Any]:
        """A required non-empty list field (a Parquet/NumPy array is accepted)."""
        value = self.data.get(key)
        if value is not None and hasattr(value, "tolist"):
            value = value.tolist()
        if not isinstance(value, list) or not value:
            raise self.error(f"field {key!r} is missing or not a non-empty list (got {value!r})")
        return value


def require_dir(data_root: Path | str, benchmark: str) -> Path:
    """The benchmark directory, or a :class:`DataError` saying what to put there."""
    root = Path(data_root).expanduser()
    if not root.is_dir():
        raise DataError(
            f"{benchmark}: data directory {root} does not exist; download the benchmark's official files "
            f"into it (expected layout: {_DOCS}, section {benchmark})"
        )
    return root.resolve()


def has_pyarrow() -> bool:
    """Whether Parquet can be read here."""
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return False
    return True


def find(root: Path, candidates: Sequence[str]) -> Path | None:
    """The first of ``candidates`` (paths relative to ``root``, globs allowed) that exists; without
    pyarrow, a later non-Parquet one (the JSONL that VSI-Bench ships beside its Parquet) is preferred."""
    found: list[Path] = []
    for pattern in candidates:
        if any(ch in pattern for ch in "*?["):
            found += sorted(root.glob(pattern))[:1]
        elif (root / pattern).exists():
            found.append(root / pattern)
    readable = found if has_pyarrow() else [p for p in found if p.suffix.lower() != ".parquet"]
    return (readable or found)[0] if found else None


def data_files(folder: Path) -> list[Path]:
    """The row files of one config folder of an HF release: its Parquet shards, else its JSONL, else its
    JSON files; the JSONL or JSON ones first when pyarrow is missing."""
    kinds = [sorted(folder.glob(f"*{suffix}")) for suffix in (".parquet", ".jsonl", ".json")]
    if not has_pyarrow():
        kinds = [*kinds[1:], kinds[0]]
    return next((files for files in kinds if files), [])


def missing(benchmark: str, root: Path, candidates: Sequence[str]) -> DataError:
    return DataError(
        f"{benchmark}: none of {', '.join(candidates)} found in {root}; put the official annotation file "
        f"there (expected layout: {_DOCS}, section {benchmark})"
    )


def resolve_media(root: Path, candidates: Sequence[str]) -> str:
    """The first candidate path (relative to ``root``) that exists, else the first one (absolute).

    A missing video is not an error at load time: it becomes a failed sample when evaluated.
    """
    for candidate in candidates:
        path = root / candidate
        if path.exists():
            return str(path)
    return str(root / candidates[0])


def _line_of(text: str, offset: int, cache: list[int]) -> int:
    # cache[0]: last offset, cache[1]: its line
    start, line = cache
    if offset < start:
        start, line = 0, 1
    line += text.count("\n", start, offset)
    cache[0], cache[1] = offset, line
    return line


def _json_error(path: Path, exc: json.JSONDecodeError) -> DataError:
    return DataError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})")


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def read_json_array(path: Path) -> Iterator[Record]:
    """The objects of a JSON array file (or a single object), each with its line number."""
    text = _read_text(path)
    decoder = json.JSONDecoder()
    pos = len(text) - len(text.lstrip())
    if text[pos : pos + 1] != "[":
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _json_error(path, exc) from exc
        if not isinstance(value, dict):
            raise DataError(f"{path}: expected a JSON array of objects, got {type(value).__name__}")
        yield Record(value, f"{path}:1")
        return
    cache = [0, 1]
    pos += 1
    index = 0
    while True:
        pos = _skip(text, pos, path)
        if text.startswith("]", pos):
            return
        if index:
            if not text.startswith(",", pos):
                raise DataError(
                    f"{path}:{_line_of(text, pos, cache)}: expected ',' or ']' between array items"
                )
            pos = _skip(text, pos + 1, path)
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise _json_error(path, exc) from exc
        line = _line_of(text, pos, cache)
        if not isinstance(value, dict):
            raise DataError(f"{path}:{line}: item {index} is {type(value).__name__}, expected an object")
        yield Record(value, f"{path}:{line}")
        pos, index = end, index + 1


def _skip(text: str, pos: int, path: Path) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    if pos >= len(text):
        raise DataError(f"{path}: unexpected end of the JSON array (truncated file?)")
    return pos


def read_json_object(path: Path) -> dict[str, Any]:
    """A whole JSON file that must hold an object (TempCompass's nested question files)."""
    try:
        value = json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise _json_error(path, exc) from exc
    if not isinstance(value, dict):
        raise DataError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def read_jsonl(path: Path) -> Iterator[Record]:
    for number, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
        if not isinstance(value, dict):
            raise DataError(f"{path}:{number}: expected a JSON object, got {type(value).__name__}")
        yield Record(value, f"{path}:{number}")


def read_parquet(path: Path) -> Iterator[Record]:
    """Rows of a Parquet file (the Hugging Face releases); needs ``pyarrow``."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise DataError(
            f"{path}: reading Parquet needs pyarrow (pip install pyarrow), or convert the file to JSON "
            "Lines with the same fields (one object per row)"
        ) from exc
    for index, row in enumerate(pq.read_table(path).to_pylist()):
        yield Record(row, f"{path}: row {index}")


def read_records(path: Path) -> list[Record]:
    """Records of a ``.json`` (array), ``.jsonl`` or ``.parquet`` file."""
    if not path.is_file():
        raise DataError(f"{path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return list(read_jsonl(path))
    if suffix == ".parquet":
        return list(read_parquet(path))
    return list(read_json_array(path))


_OPTION_LINE = re.compile(r"^\s*\(?([A-J])\s*[).:：]\s*(.*\S)\s*$")


def split_inline_options(question: str) -> tuple[str, list[str]]:
    """Split a question whose options follow it as lines ("(A) ...", "A. ...", "A: ...")."""
    lines = question.splitlines()
    options: list[str] = []
    stem: list[str] = []
    expected = "A"
    for line in lines:
        match = _OPTION_LINE.match(line)
        if match and match.group(1) == expected:
            options.append(match.group(2))
            expected = chr(ord(expected) + 1)
        elif options and line.strip():
            options[-1] += " " + line.strip()  # an option wrapped over two lines
        elif not options:
            stem.append(line)
    return "\n".join(stem).strip(), options


def iter_qa(path: Path) -> Iterator[tuple[Record, Record]]:
    """``(video, question)`` pairs of a ``video_info.meta.jsonl`` (one video per line, its ``qa`` list)."""
    for video in read_jsonl(path):
        questions = video.get("qa")
        if not isinstance(questions, list):
            raise video.error(f"field 'qa' must be a list of questions (got {questions!r})")
        for i, qa in enumerate(questions):
            if not isinstance(qa, dict):
                raise video.error(f"qa item {i} is not an object")
            yield video, Record(qa, f"{video.where} (qa {i})")
