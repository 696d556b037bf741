"""Saved predictions: one JSON object per line, appended as samples complete (resumable by id).

A record holds at least ``id`` and either ``response`` (the model's text) or ``error`` (why the
sample failed: missing video, engine error, ...). Further fields (``prediction``, ``score``,
``num_output_tokens``, ``judge_score``, ...) are kept. When an id appears twice, the last record wins
(a resumed run re-runs a failed sample and appends it again). A final line cut short by a kill (no
trailing newline, not valid JSON) is ignored: its sample simply was not completed.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from videorl.errors import DataError


@dataclass
class Prediction:
    """One saved prediction record."""

    id: str
    response: str | None
    error: str | None = None
    judge_score: float | None = None
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.error is not None or self.response is None


def _parse(record: Any, where: str) -> Prediction:
    if not isinstance(record, dict):
        raise DataError(f"{where}: a prediction must be a JSON object, got {type(record).__name__}")
    sample_id = record.get("id")
    if isinstance(sample_id, bool) or not isinstance(sample_id, (str, int)) or str(sample_id) == "":
        raise DataError(f"{where}: field 'id' (the benchmark row id) is missing or not a string")
    response = record.get("response")
    error = record.get("error")
    if response is not None and not isinstance(response, str):
        raise DataError(f"{where}: field 'response' of {sample_id!r} must be a string or null")
    if error is not None and not isinstance(error, str):
        raise DataError(f"{where}: field 'error' of {sample_id!r} must be a string or null")
    if "response" not in record and error is None:
        raise DataError(
            f"{where}: record {sample_id!r} has neither 'response' nor 'error'; write the model's text "
            "as 'response', or the reason the sample failed as 'error'"
        )
    judge = record.get("judge_score")
    if judge is not None and (
        isinstance(judge, bool)
        or not isinstance(judge, (int, float))
        or not 0.0 <= judge <= 1.0
        or math.isnan(judge)
    ):
        raise DataError(f"{where}: 'judge_score' of {sample_id!r} must be a number in [0, 1]")
    return Prediction(str(sample_id), response, error, None if judge is None else float(judge), record)


def read_predictions(path: Path | str) -> dict[str, Prediction]:
    """The predictions in a JSONL file, by id (last record per id wins)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"predictions file {path} does not exist")
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    out: dict[str, Prediction] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines) and not text.endswith("\n"):
                continue  # torn final write of a killed run: that sample is simply not done
            raise DataError(
                f"{where}: not valid JSON ({exc.msg}); each line must be one JSON object"
            ) from exc
        prediction = _parse(record, where)
        out[prediction.id] = prediction
    return out


def _last_newline(f: Any, end: int, chunk: int = 65536) -> int:
    """The offset of the last newline before ``end`` (-1 when there is none), read backwards."""
    pos = end
    while pos > 0:
        start = max(0, pos - chunk)
        f.seek(start)
        found = f.read(pos - start).rfind(b"\n")
        if found >= 0:
            return start + found
        pos = start
    return -1


def append_prediction(path: Path | str, record: dict[str, Any]) -> None:
    """Append one record as a line and flush it to disk (a kill loses at most this line).

    A torn final line left by an earlier kill is cut off first, so that the file stays valid.
    """
    _parse(record, str(path))
    line = (json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab+") as f:
        end = f.seek(0, os.SEEK_END)
        if end:
            f.seek(end - 1)
            if f.read(1) != b"\n":
                f.truncate(_last_newline(f, end) + 1)
        f.write(line)
        f.flush()
        os.fsync(f.fileno())
