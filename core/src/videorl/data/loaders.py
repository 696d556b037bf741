"""Dataset loaders: JSON/JSONL, Parquet and HF datasets in the EasyVideoR1 and Video-R1 schemas, and lists of
videos.

Accepted inputs (by :func:`load_samples`):

- ``.jsonl``: one JSON object per line; ``.json``: a JSON array of objects (or JSON lines); ``.parquet``
  and ``.arrow``: one row per record; an HF dataset folder (``save_to_disk``, the hub-cache layout, or
  data files as ``load_dataset`` reads a local path: :mod:`videorl.data.formats`);
- rows in the EasyVideoR1 schema (``problem``, ``answer``, ``videos``/``images`` lists, ``data_type``,
  ``problem_type``, ``options``, ``has_offline_trajectory``/``offline_output``) or the Video-R1 one
  (``problem_id``, ``problem``, ``solution``, ``path``, ``data_type``, ``problem_type``, ``options``);
- ``.txt``/``.lst``: one video path per line (``#`` comments); a video file; a directory of videos.

Relative media paths are resolved against ``media_root`` (default: the dataset file's folder). An image
may also be given as bytes (the ``datasets`` ``Image`` feature's ``{"bytes", "path"}`` struct, or raw
bytes): it is checked and written once to a content-addressed file (:mod:`videorl.data.images`). An
invalid row raises :class:`~videorl.errors.DataError` naming the file and line (the row number in
columnar files), unless an ``errors``
list is passed to collect them (as :class:`RowError`, with ``where``; the row is then skipped, and so is
a JSON-lines line that is not valid JSON). Files are read as UTF-8, with or without a byte-order mark.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Container, Iterator
from pathlib import Path
from typing import Any

from videorl.data.files import max_dataset_bytes, read_regular
from videorl.data.formats import ROW_FORMATS, arrow_rows, dataset_files, parquet_rows, unsupported
from videorl.data.images import default_image_dir, store_image
from videorl.data.sample import DATA_TYPES, GROUND_TRUTH_KEYS, ID_KEYS, Sample
from videorl.errors import DataError

VIDEO_EXTENSIONS = frozenset(
    {".mp4", ".mkv", ".webm", ".avi", ".mov", ".m4v", ".mpg", ".mpeg", ".flv", ".wmv", ".ts", ".3gp", ".gif"}
)
LIST_EXTENSIONS = frozenset({".txt", ".lst"})

_PROBLEM_KEYS = ("problem", "prompt", "question")
_CONSUMED = frozenset(
    {
        *_PROBLEM_KEYS,
        *GROUND_TRUTH_KEYS,
        *ID_KEYS,
        "data_type",
        "problem_type",
        "options",
        "videos",
        "video",
        "images",
        "image",
        "path",
        "has_offline_trajectory",
        "offline_output",
        "workflow",
    }
)


class RowError(DataError):
    """An invalid row, with ``where`` (``file:line``) apart from the message."""

    def __init__(self, message: str, where: str) -> None:
        super().__init__(message)
        self.where = where


def _iter_json_array(text: str, where: str) -> Iterator[tuple[int, Any]]:
    """``(line, item)`` for each element of a JSON array, with the line where the item starts."""
    decoder = json.JSONDecoder()
    i = text.index("[") + 1
    line = text.count("\n", 0, i) + 1
    size = len(text)
    while True:
        j = i
        while j < size and text[j] in " \t\r\n,":
            j += 1
        line += text.count("\n", i, j)
        if j >= size:
            raise DataError(f"{where}:{line}: the JSON array is not closed")
        if text[j] == "]":
            return
        try:
            item, end = decoder.raw_decode(text, j)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
        except RecursionError:
            raise DataError(f"{where}:{line}: nested too deeply to read") from None
        yield line, item
        line += text.count("\n", j, end)
        i = end


def read_rows(
    path: str | os.PathLike[str], errors: list[DataError] | None = None
) -> Iterator[tuple[int, Any]]:
    """``(line, row)`` for each row of a JSON array, JSON-lines, Parquet or Arrow file (numbers from 1;
    a columnar row's null fields left out). With an ``errors`` list, a JSON-lines line that is not valid
    JSON is collected there and skipped. Another suffix is an error listing the formats read."""
    where = str(path)
    suffix = Path(path).suffix.lower()
    if Path(path).is_dir():
        raise DataError(f"{where}: a folder, where one dataset file is read here; give one of its data files")
    if suffix not in ROW_FORMATS:
        raise unsupported(Path(path))
    if suffix in (".parquet", ".arrow"):
        if not Path(path).exists():
            raise DataError(f"{where}: dataset file not found")
        rows = parquet_rows(Path(path)) if suffix == ".parquet" else arrow_rows(Path(path))
        yield from ((int(w.rsplit(":", 1)[1]), row) for w, row in rows)
        return
    text = _read_text(Path(path), "dataset file")
    if text.lstrip().startswith("["):
        yield from _iter_json_array(text, where)
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            detail = (
                f"{exc.colno}: invalid JSON: {exc.msg}"
                if isinstance(exc, json.JSONDecodeError)
                else " nested too deeply to read"
            )
            error = RowError(f"{where}:{number}:{detail}", f"{where}:{number}")
            if errors is None:
                raise error from None
            errors.append(error)
            continue
        yield number, row


def _resolve(media: str, root: Path) -> str:
    return os.path.abspath(os.path.join(root, os.path.expanduser(media)))


def _media(
    row: dict[str, Any],
    keys: tuple[str, ...],
    where: str,
    root: Path,
    store: Callable[[bytes, str], str] | None,
) -> list[str]:
    """The absolute media paths under ``keys``: paths, or (with ``store``, which turns image bytes into a
    file, see :mod:`videorl.data.images`) ``datasets`` ``Image`` structs and raw bytes."""
    found: list[str] = []
    for key in keys:
        value = row.get(key)
        if value is None:
            continue
        items = value if isinstance(value, list) else [value]
        for number, item in enumerate(items, start=1):
            item_of = f" (item {number})" if isinstance(value, list) else ""
            given = item
            if isinstance(item, dict) and item and set(item) <= {"bytes", "path"}:  # datasets' Image struct
                data = item.get("bytes")
                item = (
                    item.get("path")
                    if data is None
                    else data
                    if isinstance(data, (bytes, bytearray))
                    else None
                )
            if isinstance(item, (bytes, bytearray)) and store is not None:
                found.append(store(bytes(item), f"{where}: {key!r}{item_of}"))
            elif isinstance(item, str) and item:
                found.append(_resolve(item, root))
            else:
                kind = "image bytes ({'bytes': ..., 'path': ...} as datasets writes them), " if store else ""
                only = "; videos are read from files only" if isinstance(item, (bytes, bytearray)) else ""
                raise DataError(
                    f"{where}: {key!r} must be {kind}a path or a list of paths, got "
                    f"{str(given)[:80]!r}{item_of}{only}"
                )
    return found


def _first(row: dict[str, Any], keys: tuple[str, ...]) -> tuple[str | None, Any]:
    for key in keys:
        if key in row:
            return key, row[key]
    return None, None


def parse_row(
    row: Any,
    where: str,
    *,
    media_root: Path,
    default_id: str,
    problem_types: Container[str] | None = None,
    require_answer: bool = True,
    scoring: bool = False,
    image_dir: Path | None = None,
) -> Sample:
    """Validate one row (either schema) into a :class:`Sample`; ``where`` is ``file:line``.

    This is the one row parser: training, ``cache build`` and (``scoring``, through
    :meth:`~videorl.rewards.types.RewardInput.from_sample`) ``videorl reward`` read rows with it. A row
    that is only scored may leave out the question and its media files. Images given as bytes are
    written to ``image_dir`` (default: :func:`~videorl.data.images.default_image_dir`).
    """
    if isinstance(row, str):  # a JSON list of video paths
        return Sample(
            id=default_id, data_type="video", problem="", videos=[_resolve(row, media_root)], origin=where
        )
    if not isinstance(row, dict):
        raise DataError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
    _, raw_id = _first(row, ID_KEYS)
    if raw_id is not None and not isinstance(raw_id, (str, int)):
        raise DataError(f"{where}: problem_id must be a string or an integer, got {raw_id!r:.60}")
    sample_id = str(raw_id) if raw_id is not None else default_id
    key, problem = _first(row, _PROBLEM_KEYS)
    if key is None and scoring:
        key, problem = "problem", ""
    if key is None:
        raise DataError(f"{where}: missing the question ('problem'; also read: 'prompt', 'question')")
    if not isinstance(problem, str):
        raise DataError(f"{where}: {key!r} must be a string, got {type(problem).__name__}")
    answer_key, answer = _first(row, GROUND_TRUTH_KEYS)
    if require_answer and (answer_key is None or answer is None or answer == "") and not row.get("tests"):
        raise DataError(
            f"{where}: missing the ground truth ('answer' in EasyVideoR1 rows, 'solution' in Video-R1 rows)"
        )

    # a row that is only scored reads no media: its image bytes are checked and written by training
    directory = image_dir or default_image_dir()
    store: Callable[[bytes, str], str] = (
        (lambda data, column: "") if scoring else (lambda data, column: store_image(data, column, directory))
    )
    videos = _media(row, ("videos", "video"), where, media_root, None)
    images = _media(row, ("images", "image"), where, media_root, store)
    data_type = row.get("data_type")
    if data_type is not None and data_type not in DATA_TYPES:
        raise DataError(f"{where}: data_type {data_type!r} is not one of {', '.join(DATA_TYPES)}")
    if "path" in row:  # Video-R1: one media path, whose kind data_type says
        image = data_type == "image"
        (images if image else videos).extend(
            _media(row, ("path",), where, media_root, store if image else None)
        )
    images = [i for i in images if i]
    if data_type is None:
        data_type = (
            "video" if videos else "image" if images or row.get("images") or row.get("image") else "text"
        )
    if data_type == "video" and not videos and not scoring:
        raise DataError(f"{where}: data_type is video but the row names no video ('videos' or 'path')")
    if data_type == "image" and not images and not scoring:
        raise DataError(f"{where}: data_type is image but the row names no image ('images' or 'path')")

    problem_type = row.get("problem_type", "")
    if not isinstance(problem_type, str):
        raise DataError(f"{where}: problem_type must be a string, got {problem_type!r:.60}")
    if problem_types is not None and problem_type not in problem_types:
        known = sorted(problem_types) if isinstance(problem_types, (set, frozenset, list, tuple)) else None
        hint = f"; known: {', '.join(known)}" if known else ""
        raise DataError(f"{where}: unknown problem_type {problem_type!r} (no reward handles it){hint}")
    options = row.get("options")
    if options is not None and (
        not isinstance(options, list) or not all(isinstance(o, str) for o in options)
    ):
        raise DataError(f"{where}: options must be a list of strings, got {options!r:.80}")

    offline = row.get("offline_output")
    flag = row.get("has_offline_trajectory")
    if flag and not (isinstance(offline, str) and offline):
        raise DataError(f"{where}: has_offline_trajectory is set but offline_output is missing or empty")
    if offline is not None and not isinstance(offline, str):
        raise DataError(f"{where}: offline_output must be a string, got {type(offline).__name__}")
    offline_output = offline if (flag or flag is None) and offline else None
    workflow = row.get("workflow")
    if workflow is not None and not (isinstance(workflow, str) and workflow.strip()):
        raise DataError(
            f"{where}: workflow must be a workflow's name (e.g. tool_agent), got {workflow!r:.60}"
        )

    return Sample(
        id=sample_id,
        data_type=data_type,
        problem=problem,
        problem_type=problem_type,
        ground_truth=answer,
        options=options,
        videos=videos,
        images=images,
        offline_output=offline_output,
        extra={k: v for k, v in row.items() if k not in _CONSUMED},
        origin=where,
        workflow=workflow,
    )


def _read_text(path: Path, what: str) -> str:
    """The UTF-8 text of the regular file ``path`` (a dataset or video list), at most
    :func:`~videorl.data.files.max_dataset_bytes` long."""
    if not path.exists():
        raise DataError(f"{path}: {what} not found")
    try:
        return read_regular(path, max_dataset_bytes(), what=f"the {what}").decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: cannot read the {what} ({exc})") from None


def _video_list(path: Path, root: Path) -> Iterator[tuple[str, str]]:
    for number, line in enumerate(_read_text(path, "video list").splitlines(), start=1):
        entry = line.strip()
        if entry and not entry.startswith("#"):
            yield f"{path}:{number}", _resolve(entry, root)


def load_samples(
    path: str | os.PathLike[str],
    *,
    media_root: str | os.PathLike[str] | None = None,
    problem_types: Container[str] | None = None,
    require_answer: bool = True,
    errors: list[DataError] | None = None,
    image_dir: str | os.PathLike[str] | None = None,
) -> list[Sample]:
    """The samples of one dataset (file or HF dataset folder), video list, video file or folder of videos.

    ``problem_types`` (e.g. the reward registry, which matches aliases) rejects rows whose
    ``problem_type`` no reward handles. ``require_answer=False`` accepts rows without ground truth
    (``videorl cache build`` needs only the media). A row without an id gets ``<file stem>:<row
    number>``; duplicate ids are an error.
    """
    path = Path(path)
    dataset = dataset_files(path, VIDEO_EXTENSIONS) if path.is_dir() else (path.absolute().parent, [path])
    if dataset is None:
        found = sorted(p for p in path.rglob("*") if p.suffix.lower() in VIDEO_EXTENSIONS and p.is_file())
        return [
            Sample(
                id=str(p.relative_to(path)),
                data_type="video",
                problem="",
                videos=[str(p.absolute())],
                origin=str(p),
            )
            for p in found
        ]
    if path.suffix.lower() in VIDEO_EXTENSIONS:
        return [
            Sample(
                id=path.name, data_type="video", problem="", videos=[os.path.abspath(path)], origin=str(path)
            )
        ]
    base, files = dataset
    root = Path(media_root) if media_root is not None else base.absolute()
    if path.suffix.lower() in LIST_EXTENSIONS:
        return [
            Sample(id=where, data_type="video", problem="", videos=[video], origin=where)
            for where, video in _video_list(path, root)
        ]

    samples: list[Sample] = []
    seen: dict[str, str] = {}
    for file in files:
        for number, (line, row) in enumerate(read_rows(file, errors), start=1):
            where = f"{file}:{line}"
            try:
                sample = parse_row(
                    row,
                    where,
                    media_root=root,
                    default_id=f"{file.stem}:{number}",
                    problem_types=problem_types,
                    require_answer=require_answer,
                    image_dir=Path(image_dir) if image_dir is not None else None,
                )
                if sample.id in seen:
                    raise DataError(
                        f"{where}: duplicate sample id {sample.id!r} (first at {seen[sample.id]})"
                    )
            except DataError as exc:
                if errors is None:
                    raise
                errors.append(RowError(str(exc), where))
                continue
            seen[sample.id] = where
            samples.append(sample)
    return samples
