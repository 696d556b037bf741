"""Saved predictions: one JSON object per line, appended as samples complete (resumable by id).

A record holds at least ``id`` and either ``response`` (the model's text) or ``error`` (why the
sample failed: missing video, engine error, ...). Further fields (``prediction``, ``score``,
``num_output_tokens``, ``judge_score``, ...) are kept. A row answered through a workflow
(``--workflow tool_agent``) also has ``turns``, ``end`` (why its episode ended) and ``tool_calls``
(each call's ``name``, ``arguments``, ``turn``, ``valid``, ``reason`` when refused, ``frames``
fetched), which :func:`tool_summary` sums up. When an id appears twice, the last record wins
(a resumed run re-runs a failed sample and appends it again). A final line cut short by a kill (no
trailing newline, not valid JSON) is ignored: its sample simply was not completed.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable
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
    _check_tool_fields(record, where, sample_id)
    judge = record.get("judge_score")
    if judge is not None and (
        isinstance(judge, bool)
        or not isinstance(judge, (int, float))
        or not 0.0 <= judge <= 1.0
        or math.isnan(judge)
    ):
        raise DataError(f"{where}: 'judge_score' of {sample_id!r} must be a number in [0, 1]")
    return Prediction(str(sample_id), response, error, None if judge is None else float(judge), record)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_tool_fields(record: dict[str, Any], where: str, sample_id: Any) -> None:
    """The fields of a row answered through a workflow, where present, are what :func:`tool_summary`
    reads: ``turns`` a count, ``tool_calls`` a list of calls with a name, a validity and frames."""
    if "turns" in record and not _count(record["turns"]):
        raise DataError(f"{where}: 'turns' of {sample_id!r} must be a whole number >= 0")
    calls = record.get("tool_calls")
    if calls is None:
        return
    if not isinstance(calls, list) or not all(
        isinstance(c, dict)
        and isinstance(c.get("name"), str)
        and isinstance(c.get("valid"), bool)
        and _count(c.get("frames", 0))
        for c in calls
    ):
        raise DataError(
            f"{where}: 'tool_calls' of {sample_id!r} must be a list of objects, each with a string 'name', "
            "a boolean 'valid' and a whole number 'frames'"
        )


def tool_summary(predictions: Iterable[Prediction]) -> dict[str, Any] | None:
    """What the rows answered through a workflow did (None when none was): ``samples``,
    ``turns_per_sample``, ``calls_per_sample``, ``calls`` per tool, ``invalid_calls``, ``frames``
    fetched and ``ends`` (episodes per ending: answer, length, max_turns, visual_tokens)."""
    answered = [p.record for p in predictions if not p.failed and "turns" in p.record]
    if not answered:
        return None
    calls: Counter[str] = Counter()
    invalid = frames = 0
    for record in answered:
        for call in record.get("tool_calls") or ():
            calls[call["name"]] += 1
            invalid += not call["valid"]
            frames += call.get("frames", 0)
    ends = Counter(r["end"] for r in answered if isinstance(r.get("end"), str))
    n = len(answered)
    return {
        "samples": n,
        "turns_per_sample": round(sum(r["turns"] for r in answered) / n, 4),
        "calls_per_sample": round(sum(calls.values()) / n, 4),
        "calls": dict(sorted(calls.items())),
        "invalid_calls": invalid,
        "frames": frames,
        "ends": dict(sorted(ends.items())),
    }


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
