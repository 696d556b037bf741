"""Aggregation helpers shared by benchmark adapters and the evaluator: means, per-category breakdowns."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from videorl.benchmark import BenchmarkRow


def mean(values: Iterable[float]) -> float:
    """The arithmetic mean; 0.0 for no values (an empty category scores nothing)."""
    items = list(values)
    return sum(items) / len(items) if items else 0.0


def macro_mean(values: Mapping[str, float]) -> float:
    """The unweighted mean of already aggregated values (e.g. per-task accuracies)."""
    return mean(values.values())


def _labels(row: BenchmarkRow, key: str) -> list[str]:
    value = row.categories.get(key)
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def group_scores(rows: Sequence[BenchmarkRow], scores: Sequence[float], key: str) -> dict[str, list[float]]:
    """Scores per value of category ``key``; a row with a list value counts in each of its values."""
    if len(rows) != len(scores):
        raise ValueError(f"{len(rows)} rows but {len(scores)} scores")
    groups: dict[str, list[float]] = {}
    for row, score in zip(rows, scores, strict=True):
        for label in _labels(row, key):
            groups.setdefault(label, []).append(score)
    return {label: groups[label] for label in sorted(groups)}


def group_means(rows: Sequence[BenchmarkRow], scores: Sequence[float], key: str) -> dict[str, float]:
    """Mean score per value of category ``key`` (values sorted)."""
    return {label: mean(values) for label, values in group_scores(rows, scores, key).items()}


def category_keys(rows: Iterable[BenchmarkRow]) -> list[str]:
    """Every category kind that appears in ``rows``, in first-seen order."""
    keys: dict[str, None] = {}
    for row in rows:
        for key in row.categories:
            keys.setdefault(key, None)
    return list(keys)


def breakdown(
    rows: Sequence[BenchmarkRow], scores: Sequence[float], keys: Sequence[str] | None = None
) -> dict[str, dict[str, float]]:
    """``{kind: {value: mean score}}`` for ``keys`` (default: every kind present in ``rows``)."""
    return {key: group_means(rows, scores, key) for key in (category_keys(rows) if keys is None else keys)}


def benchmark_summary(
    overall: float,
    categories: Mapping[str, Mapping[str, float]],
    *,
    metric: str = "accuracy",
    metrics: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """An aggregate in the shape :meth:`videorl.api.Benchmark.aggregate` returns."""
    out: dict[str, Any] = {
        "overall": float(overall),
        "metric": metric,
        "categories": {k: {v: float(x) for v, x in vals.items()} for k, vals in categories.items()},
    }
    if metrics:
        out["metrics"] = {k: float(v) for k, v in metrics.items()}
    return out
