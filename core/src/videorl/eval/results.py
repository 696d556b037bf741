"""The results layout of an evaluation run directory (written by the evaluator and ``videorl eval``).

::

    RUN/
      results.json                   {"format": "videorl-eval/1",
                                      "settings": {...},        # model, fps, frames, pixels, template,
                                                                # sampling, plugin versions, ...
                                      "benchmarks": {NAME: summary, ...}}
      NAME/predictions.jsonl         one record per sample, appended as samples complete
                                     ({"id", "response" | "error", ...}; see videorl.eval.predictions)
      NAME/scores.jsonl              one line per row: {"id", "score", "prediction", "failed"?}

A benchmark's ``summary`` is its adapter's aggregate (``overall``, ``metric``, ``categories``,
optional ``metrics``) plus ``n``, ``n_failed`` and ``failed`` (``[{"id", "reason"}]``). ``NAME`` is the
registered benchmark name. Every file is written atomically (:mod:`videorl.atomic`),
except ``predictions.jsonl``, which is appended line by line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from videorl.atomic import atomic_write_text
from videorl.errors import DataError
from videorl.eval.scoring import BenchmarkResult

FORMAT = "videorl-eval/1"
RESULTS_FILE = "results.json"
PREDICTIONS_FILE = "predictions.jsonl"
SCORES_FILE = "scores.jsonl"

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def benchmark_dir(run_dir: Path | str, name: str) -> Path:
    """``RUN/NAME``: where a benchmark's predictions and scores live."""
    if not _SAFE_NAME.match(name):
        raise ValueError(f"benchmark name {name!r} cannot be a directory name")
    return Path(run_dir) / name


def predictions_path(run_dir: Path | str, name: str) -> Path:
    return benchmark_dir(run_dir, name) / PREDICTIONS_FILE


def scores_path(run_dir: Path | str, name: str) -> Path:
    return benchmark_dir(run_dir, name) / SCORES_FILE


def read_results(run_dir: Path | str) -> dict[str, Any]:
    """``RUN/results.json``, checked: a missing or malformed file is a :class:`DataError`."""
    path = Path(run_dir) / RESULTS_FILE
    if not path.is_file():
        raise DataError(f"{path} does not exist: is {run_dir} an evaluation run directory?")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), dict):
        raise DataError(f"{path}: expected an object with a 'benchmarks' object (format {FORMAT})")
    for name, entry in data["benchmarks"].items():
        overall = entry.get("overall") if isinstance(entry, dict) else None
        if isinstance(overall, bool) or not isinstance(overall, (int, float)):
            raise DataError(f"{path}: benchmark {name!r} has no numeric 'overall'")
        if not isinstance(entry.get("categories", {}), dict):
            raise DataError(f"{path}: benchmark {name!r}: 'categories' must be an object")
    return data


def read_scores(run_dir: Path | str, name: str) -> dict[str, float] | None:
    """The per-row scores in ``RUN/NAME/scores.jsonl`` by id; ``None`` when the run has no such file."""
    path = scores_path(run_dir, name)
    if not path.is_file():
        return None
    out: dict[str, float] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            score = record["score"]
            if isinstance(score, bool) or not isinstance(score, (int, float)):
                raise TypeError
            out[str(record["id"])] = float(score)
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise DataError(
                f"{path}:{number}: expected {{\"id\", \"score\": number, ...}} (rescore with videorl eval score --run)"
            ) from exc
    return out


def record_result(
    run_dir: Path | str, result: BenchmarkResult, settings: Mapping[str, Any] | None = None
) -> Path:
    """Write ``NAME/scores.jsonl`` and put the summary into ``results.json`` (other entries kept)."""
    run_dir = Path(run_dir)
    lines = "".join(json.dumps(r.as_dict(), ensure_ascii=False) + "\n" for r in result.rows)
    atomic_write_text(scores_path(run_dir, result.benchmark), lines)
    path = run_dir / RESULTS_FILE
    data: dict[str, Any] = (
        read_results(run_dir) if path.exists() else {"format": FORMAT, "settings": {}, "benchmarks": {}}
    )
    if settings:
        data.setdefault("settings", {}).update(settings)
    data["benchmarks"][result.benchmark] = result.summary
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False) + "\n")
    return path
