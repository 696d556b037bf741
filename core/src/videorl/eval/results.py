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

This module is the one writer of ``results.json``: :func:`begin_run` (the settings, checked on resume),
:func:`record_result` (a benchmark's summary) and :func:`write_timing` (where the time went).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.atomic import atomic_write_text
from videorl.errors import ConfigError, DataError
from videorl.eval.scoring import BenchmarkResult
from videorl.runs.lock import FolderLock

if TYPE_CHECKING:
    from videorl.eval.inputs import RowInputs
    from videorl.eval.pipeline import EvalTask
    from videorl.generation import SamplingParams

FORMAT = "videorl-eval/1"
RESULTS_FILE = "results.json"
PREDICTIONS_FILE = "predictions.jsonl"
SCORES_FILE = "scores.jsonl"
#: settings that must match for a run directory to be resumed (the others are informative)
IDENTITY_KEYS = ("model", "engine", "video", "image", "clip", "prompt", "sampling", "workflow")

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


def _score_records(run_dir: Path | str, name: str) -> list[tuple[str, float, Any]] | None:
    """``(id, score, prediction)`` of each line of ``RUN/NAME/scores.jsonl``; ``None`` without the file."""
    path = scores_path(run_dir, name)
    if not path.is_file():
        return None
    out: list[tuple[str, float, Any]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            score = record["score"]
            if isinstance(score, bool) or not isinstance(score, (int, float)):
                raise TypeError
            out.append((str(record["id"]), float(score), record.get("prediction")))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise DataError(
                f'{path}:{number}: expected {{"id", "score": number, ...}} (rescore with videorl eval score '
                "--run)"
            ) from exc
    return out


def read_scores(run_dir: Path | str, name: str) -> dict[str, float] | None:
    """The per-row scores in ``RUN/NAME/scores.jsonl`` by id; ``None`` when the run has no such file."""
    found = read_scored_rows(run_dir, name)
    return None if found is None else found[0]


def read_scored_rows(run_dir: Path | str, name: str) -> tuple[dict[str, float], dict[str, Any]] | None:
    """The per-row scores and extracted predictions in ``RUN/NAME/scores.jsonl``, each by id (an adapter
    that aggregates predictions needs both); ``None`` when the run has no such file."""
    records = _score_records(run_dir, name)
    if records is None:
        return None
    return {i: score for i, score, _ in records}, {i: prediction for i, _, prediction in records}


def _read_or_new(run_dir: Path) -> dict[str, Any]:
    """``results.json`` as it is, or an empty one of this :data:`FORMAT`."""
    if (run_dir / RESULTS_FILE).exists():
        return read_results(run_dir)
    return {"format": FORMAT, "settings": {}, "benchmarks": {}}


_WRITING = threading.Lock()  # results.json is read, changed and written by one thread at a time


@contextmanager
def _updating(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir`` (:class:`~videorl.runs.lock.FolderLock`: another process that writes it, ``eval
    run`` or ``eval score --run``, is refused naming its pid) while ``results.json`` is read and written."""
    with _WRITING, FolderLock.acquire(run_dir, "the evaluation folder"):
        yield


def _write(run_dir: Path, data: Mapping[str, Any]) -> Path:
    path = run_dir / RESULTS_FILE
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return path


def record_result(
    run_dir: Path | str, result: BenchmarkResult, settings: Mapping[str, Any] | None = None
) -> Path:
    """Write ``NAME/scores.jsonl`` and put the summary into ``results.json`` (other entries kept)."""
    run_dir = Path(run_dir)
    lines = "".join(json.dumps(r.as_dict(), ensure_ascii=False) + "\n" for r in result.rows)
    with _updating(run_dir):
        atomic_write_text(scores_path(run_dir, result.benchmark), lines)
        data = _read_or_new(run_dir)
        if settings:
            data.setdefault("settings", {}).update(settings)
        data["benchmarks"][result.benchmark] = result.summary
        return _write(run_dir, data)


def write_timing(run_dir: Path | str, timing: Mapping[str, Any]) -> Path:
    """Put the run's stage times (``StageTimes.as_dict()``) into ``results.json``."""
    run_dir = Path(run_dir)
    with _updating(run_dir):
        data = read_results(run_dir)
        data["timing"] = dict(timing)
        return _write(run_dir, data)


def _differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out += _differences(old.get(key), new.get(key), f"{prefix}.{key}" if prefix else str(key))
        return out
    return [] if old == new else [f"{prefix}: {json.dumps(old)} in the run, {json.dumps(new)} now"]


def begin_run(run_dir: Path | str, settings: Mapping[str, Any]) -> None:
    """Write ``settings`` into ``RUN/results.json`` before evaluating (scores already there are kept).

    Resuming a run directory requires the settings that decide the predictions (:data:`IDENTITY_KEYS`,
    and each benchmark's data directory) to be the ones it was started with; otherwise a
    :class:`ConfigError` lists what differs. ``settings["benchmarks"]`` (per-benchmark settings) is
    merged, so that a run directory can gain benchmarks.
    """
    run_dir = Path(run_dir)
    with _updating(run_dir):
        resumed = (run_dir / RESULTS_FILE).exists()
        data = _read_or_new(run_dir)
        old = data.get("settings") or {}
        diffs: list[str] = []
        if old:
            for key in IDENTITY_KEYS:
                diffs += _differences(old.get(key), settings.get(key), key)
            for name, bench in (settings.get("benchmarks") or {}).items():
                before = (old.get("benchmarks") or {}).get(name)
                if before and before.get("data_root") != bench.get("data_root"):
                    diffs.append(
                        f"benchmarks.{name}.data_root: {before.get('data_root')!r} in the run, "
                        f"{bench.get('data_root')!r} now"
                    )
        if diffs:
            raise ConfigError(
                f"{run_dir / RESULTS_FILE}: this run directory was evaluated with other settings, so its "
                "predictions cannot be resumed with these: " + "; ".join(diffs) + ". Use the same "
                "settings, or another --out."
            )
        merged = {**(old.get("benchmarks") or {}), **(settings.get("benchmarks") or {})}
        data["settings"] = {**old, **settings, "benchmarks": merged} if resumed else dict(settings)
        _write(run_dir, data)


def _sha256(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


def run_settings(
    inputs: RowInputs,
    sampling: SamplingParams,
    *,
    model: Path | str,
    engine: Mapping[str, Any],
    requirements: Sequence[str],
    tasks: Sequence[EvalTask],
    limit: int | None = None,
    pipeline: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Every setting of a run, for ``results.json``: model, engine, video and image budgets, the clip
    policy, prompt variant, sampling, installed distributions (``videorl plugins --requirements``),
    the benchmarks' directories, and (informative) the pipeline's concurrency."""
    from videorl.eval.inputs import CLIP_POLICY

    tokenizer = inputs.backend.processor.tokenizer
    return {
        "model": {"path": str(Path(model).resolve()), "family": inputs.backend.family},
        "engine": dict(engine),
        "video": inputs.media.video_params.to_dict(),
        "image": asdict(inputs.media.image_params),
        "clip": CLIP_POLICY,
        "prompt": {
            "family": inputs.backend.family,
            "thinking": inputs.thinking,
            "system": inputs.system,
            "chat_template_sha256": _sha256(getattr(tokenizer, "chat_template", None)),
            "response_decoding": "skip_special_tokens",
        },
        "sampling": asdict(sampling),
        "requirements": list(requirements),
        "benchmarks": {
            t.name: {"data_root": str(t.data_root.resolve()), "rows": len(t.rows), "limit": limit}
            for t in tasks
        },
        "pipeline": dict(pipeline or {}),
    }
