"""Scoring saved responses with a benchmark adapter: per row, then the official aggregate.

Failure accounting: a row without a prediction, a prediction recorded with an ``error`` (or no
response), and a row whose extraction or scoring raised all score 0 and are listed with their
reason; none is ever dropped from the denominator by the core (an adapter's official figure may leave
rows out, see :func:`aggregator`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from videorl.benchmark import Benchmark, BenchmarkRow
from videorl.eval.predictions import Prediction, tool_summary

MISSING = "missing prediction"

#: an adapter's aggregate as a function of rows and their scores (what a bootstrap resample recomputes)
Aggregate = Callable[[list[BenchmarkRow], list[float]], Mapping[str, Any]]


def aggregator(benchmark: Benchmark, predictions: Mapping[str, Any] | None = None) -> Aggregate:
    """``benchmark.aggregate`` as a function of rows and scores.

    An adapter whose official figures depend on what was read from a row, not only on its score (a
    denominator of the rows its official scorer could read, a second reading reported beside the official
    one), sets ``aggregates_predictions = True``. Its aggregate is then called as ``aggregate(rows, scores,
    predictions)`` with each row's extracted prediction, looked up by row id in ``predictions`` (``None``
    where there is none), so that a bootstrap resample of rows carries its rows' predictions.
    """
    if not getattr(benchmark, "aggregates_predictions", False):
        return benchmark.aggregate
    full: Callable[..., Mapping[str, Any]] = benchmark.aggregate
    found = predictions or {}

    def aggregate(rows: list[BenchmarkRow], scores: list[float]) -> Mapping[str, Any]:
        return full(rows, scores, [found.get(row.id) for row in rows])

    return aggregate


@dataclass
class RowResult:
    """The outcome of one row: the extracted prediction, its score, and why it failed (if it did)."""

    id: str
    score: float
    prediction: Any = None
    failed: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.failed is None:
            del out["failed"]
        return out


@dataclass
class BenchmarkResult:
    """A benchmark's per-row results and official summary."""

    benchmark: str
    summary: dict[str, Any]
    rows: list[RowResult]
    failed: list[dict[str, str]] = field(default_factory=list)
    unknown_ids: list[str] = field(default_factory=list)


def score_row(benchmark: Benchmark, row: BenchmarkRow, prediction: Prediction | None) -> RowResult:
    """Score one row's prediction; a missing or failed prediction scores 0 with its reason."""
    if prediction is None:
        return RowResult(row.id, 0.0, failed=MISSING)
    if prediction.error is not None or prediction.response is None:
        return RowResult(row.id, 0.0, failed=prediction.error or "no response")
    try:
        extracted = benchmark.extract(row, prediction.response)
        score = float(benchmark.score(row, extracted))
    except Exception as exc:  # an adapter bug on one row must not lose the run
        return RowResult(row.id, 0.0, failed=f"scoring error: {type(exc).__name__}: {exc}")
    if math.isnan(score) or not 0.0 <= score <= 1.0:
        return RowResult(row.id, 0.0, extracted, failed=f"scoring error: score {score} outside [0, 1]")
    if row.problem_type == "open_ended" and prediction.judge_score is not None:
        score = prediction.judge_score
    return RowResult(row.id, score, extracted)


def summarize(
    benchmark: Benchmark,
    rows: Sequence[BenchmarkRow],
    results: Sequence[RowResult],
    unknown_ids: Sequence[str] = (),
) -> BenchmarkResult:
    """The official aggregate over ``results`` (aligned with ``rows``), with the failure list."""
    if [r.id for r in rows] != [r.id for r in results]:
        raise ValueError("results must be aligned with rows (same ids, same order)")
    scores = [r.score for r in results]
    summary = dict(aggregator(benchmark, {r.id: r.prediction for r in results})(list(rows), scores))
    failed = [{"id": r.id, "reason": r.failed} for r in results if r.failed is not None]
    summary["n"] = len(rows)
    summary["n_failed"] = len(failed)
    summary["failed"] = failed
    return BenchmarkResult(benchmark.name, summary, list(results), failed, sorted(unknown_ids))


def score_predictions(
    benchmark: Benchmark, rows: Sequence[BenchmarkRow], predictions: Mapping[str, Prediction]
) -> BenchmarkResult:
    """Score saved predictions (by id) against every row of a benchmark; rows answered through a
    workflow add the summary's ``tools`` (:func:`~videorl.eval.predictions.tool_summary`)."""
    results = [score_row(benchmark, row, predictions.get(row.id)) for row in rows]
    known = {row.id for row in rows}
    result = summarize(benchmark, rows, results, [i for i in predictions if i not in known])
    tools = tool_summary(predictions[row.id] for row in rows if row.id in predictions)
    if tools is not None:
        result.summary["tools"] = tools
    return result
