"""Confidence intervals and paired tests for benchmark scores, on the adapters' own aggregates.

Every figure a benchmark reports (``overall``, its ``metrics`` and each category value: its *lines*,
see :func:`summary_lines`) gets a 95% interval. The bootstrap resamples the benchmark's rows with
replacement and recomputes the adapter's :meth:`~videorl.api.Benchmark.aggregate` on each resample, so
a macro average (MVBench's mean of task accuracies, OVO-Bench's mean of categories) is resampled as the
macro average it is, not as a plain mean. Each figure gets one interval, by what the adapter declares
it to be (its ``proportions``, :func:`proportion_lines`): a proportion of 0/1 scores of independent
rows (an accuracy over all rows or over one category's rows) gets the analytic Wilson score interval;
anything else (a macro average, a group score, a mean of partial scores) the bootstrap. A line is never
given Wilson because its value happens to equal a proportion (a macro average over balanced categories).

Two runs are compared on the row ids both scored: the same resampled rows are aggregated for both runs
(a paired bootstrap) and the difference's interval taken; for accuracies McNemar's test on the
discordant rows adds a p-value (exact binomial below :data:`MCNEMAR_EXACT_BELOW` discordant rows).

An adapter whose aggregate scores some rows together (a group of questions scored as one) names the
field of ``row.extra`` holding the group in a ``resample_group`` attribute: whole groups are resampled
then (a cluster bootstrap), not rows, and no Wilson interval or McNemar test is given (its rows are not
independent). Without it a resample would cut groups apart and bias the figure.

Resampling is seeded per benchmark (the seed and the benchmark's name), so ``videorl eval score`` and
``videorl eval compare`` give the same interval for the same rows, whichever other benchmarks they show.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from videorl.benchmark import BenchmarkRow
from videorl.eval.aggregate import mean

LEVEL = 0.95
Z = 1.959963984540054  # the standard normal's 97.5% quantile
DEFAULT_RESAMPLES = 1000
DEFAULT_SEED = 0
MCNEMAR_EXACT_BELOW = 25  # discordant rows: the exact binomial test below, chi-square (corrected) from here

Aggregate = Callable[[list[BenchmarkRow], list[float]], Mapping[str, Any]]


class ResampleError(ValueError):
    """The adapter's aggregate failed on a resample of its rows."""


def resample_group(benchmark: object) -> str | None:
    """The adapter's ``resample_group`` (the ``row.extra`` field grouping rows scored together), if any."""
    group = getattr(benchmark, "resample_group", None)
    if group is not None and not isinstance(group, str):
        raise TypeError(
            f"{type(benchmark).__name__}.resample_group must be a field name (str), got {group!r}"
        )
    return group


def proportions(benchmark: object) -> frozenset[str]:
    """The figures the adapter declares proportions of 0/1 row scores (its ``proportions`` attribute):
    ``"overall"`` and metric names (over all rows), category kinds (each value over its rows), or
    ``"categories"`` (every kind). Undeclared figures are aggregates."""
    declared = getattr(benchmark, "proportions", ())
    if isinstance(declared, str) or not all(isinstance(d, str) for d in declared):
        raise TypeError(
            f"{type(benchmark).__name__}.proportions must be a collection of figure names (str), "
            f"got {declared!r}"
        )
    return frozenset(declared)


def proportion_lines(
    summary: Mapping[str, Any], declared: frozenset[str]
) -> dict[str, tuple[str, str] | None]:
    """The lines of ``summary`` declared proportions: label -> the ``(kind, value)`` of the category whose
    rows it is over, ``None`` for all rows (see :func:`summary_lines` for the labels)."""
    metric = summary.get("metric") or "score"
    out: dict[str, tuple[str, str] | None] = {}
    if "overall" in declared:
        out[f"overall ({metric})"] = None
    out.update({str(name): None for name in summary.get("metrics") or {} if name in declared})
    for kind, values in (summary.get("categories") or {}).items():
        if kind in declared or "categories" in declared:
            out.update({f"{kind}: {value}": (str(kind), str(value)) for value in values})
    return out


def summary_lines(summary: Mapping[str, Any]) -> dict[str, float]:
    """A summary's figures by label: ``overall (METRIC)``, each metric, ``KIND: VALUE`` per category."""
    metric = summary.get("metric") or "score"
    out = {f"overall ({metric})": float(summary["overall"])}
    for name, value in (summary.get("metrics") or {}).items():
        out[str(name)] = float(value)
    for kind, values in (summary.get("categories") or {}).items():
        for value, score in values.items():
            out[f"{kind}: {value}"] = float(score)
    return out


@dataclass(frozen=True)
class Interval:
    """A 95% interval and how it was made: ``bootstrap`` (percentile) or ``wilson``."""

    low: float
    high: float
    method: str

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0.0 or self.high < 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "method": self.method}


def wilson(successes: int, n: int, z: float = Z) -> Interval:
    """The Wilson score interval of ``successes`` out of ``n``."""
    if n <= 0:
        raise ValueError("a proportion needs at least one row")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return Interval(max(0.0, centre - half), min(1.0, centre + half), "wilson")


def percentile_interval(values: np.ndarray, level: float = LEVEL) -> Interval | None:
    """The percentile interval of bootstrap replicates (NaN = the line was absent from a resample)."""
    present = values[~np.isnan(values)]
    if present.size == 0:
        return None
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(present, [tail, 100 - tail])
    return Interval(float(low), float(high), "bootstrap")


@dataclass(frozen=True)
class McNemar:
    """McNemar's test: ``b`` rows right in A only, ``c`` right in B only, and the two-sided p-value."""

    b: int
    c: int
    p: float
    method: str  # "exact" (binomial) or "chi2" (with continuity correction)

    def as_dict(self) -> dict[str, Any]:
        return {"b": self.b, "c": self.c, "p": self.p, "method": self.method}


def mcnemar(b: int, c: int) -> McNemar:
    """McNemar's two-sided test on the discordant counts ``b`` and ``c``."""
    n = b + c
    if n < MCNEMAR_EXACT_BELOW:
        tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2**n
        return McNemar(b, c, min(1.0, 2 * tail), "exact")
    statistic = (abs(b - c) - 1) ** 2 / n
    return McNemar(b, c, math.erfc(math.sqrt(statistic / 2)), "chi2")


def resample_indices(n: int, resamples: int, seed: int, name: str) -> np.ndarray:
    """``resamples × n`` row indices drawn with replacement, seeded by ``seed`` and the benchmark ``name``."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))])
    return rng.integers(0, n, size=(resamples, n))


def _binary(scores: Sequence[float]) -> bool:
    return all(s in (0.0, 1.0) for s in scores)


class Units:
    """The resampling units of some rows: each row alone, or (``group``: a field of ``row.extra``) the
    rows sharing its value, which an adapter scores together (Video-MME v2's groups of four, VideoMathQA's
    binary sub-questions). A unit drawn twice is given a fresh group value the second time, so that the
    adapter sees two groups, not one of double size."""

    def __init__(self, rows: Sequence[BenchmarkRow], group: str | None = None) -> None:
        self.rows, self.group = list(rows), group
        members: dict[Any, list[int]] = {}
        self.members: list[list[int]] = []
        for i, row in enumerate(self.rows):
            if group is None or group not in row.extra:
                self.members.append([i])
            elif row.extra[group] in members:
                members[row.extra[group]].append(i)
            else:
                members[row.extra[group]] = [i]
                self.members.append(members[row.extra[group]])
        ints = [
            abs(row.extra[group]) for row in self.rows if group in row.extra and _is_int(row.extra[group])
        ]
        self._stride = 2 * max(ints, default=0) + 1  # int values v + k × stride never collide
        self._grouped = group is not None and any(group in row.extra for row in self.rows)

    @property
    def independent(self) -> bool:
        """Whether every unit is one row (rows are independent draws)."""
        return len(self.members) == len(self.rows)

    def _fresh(self, value: Any, copy: int) -> Any:
        if _is_int(value):
            return value + copy * self._stride
        return f"{value}#{copy}" if isinstance(value, str) else (value, copy)

    def draw(self, picks: np.ndarray, scores: Sequence[float]) -> tuple[list[BenchmarkRow], list[float]]:
        """The rows and scores of the units ``picks`` (indices into the units, with repeats)."""
        if not self._grouped:
            return [self.rows[i] for i in picks], [scores[i] for i in picks]
        copies: dict[int, int] = {}
        rows, out = [], []
        for unit in picks.tolist():
            copy = copies[unit] = copies.get(unit, -1) + 1
            for i in self.members[unit]:
                row = self.rows[i]
                if copy and self.group is not None and self.group in row.extra:
                    row = replace(
                        row, extra={**row.extra, self.group: self._fresh(row.extra[self.group], copy)}
                    )
                rows.append(row)
                out.append(scores[i])
        return rows, out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _replicates(
    aggregate: Aggregate,
    units: Units,
    scores: Sequence[float],
    picks: np.ndarray,
    labels: Sequence[str],
) -> dict[str, np.ndarray]:
    """Each line's value on each resample (NaN where a resample lacks it, e.g. a category not drawn)."""
    out = {label: np.full(len(picks), np.nan) for label in labels}
    for r, pick in enumerate(picks):
        try:
            lines = summary_lines(aggregate(*units.draw(pick, scores)))
        except Exception as exc:  # an adapter that cannot aggregate a resample: say so, never guess
            raise ResampleError(
                f"its aggregate failed on a bootstrap resample of its rows ({type(exc).__name__}: {exc})"
            ) from exc
        for label in labels:
            if label in lines:
                out[label][r] = lines[label]
    return out


def _row_labels(row: BenchmarkRow, kind: str) -> list[str]:
    value = row.categories.get(kind)
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _proportion_rows(
    where: tuple[str, str] | None, rows: Sequence[BenchmarkRow], scores: Sequence[float]
) -> list[float]:
    """The scores of the rows a line is about: all rows, or those of one category value."""
    if where is None:
        return list(scores)
    kind, value = where
    return [s for row, s in zip(rows, scores, strict=True) if value in _row_labels(row, kind)]


@dataclass
class BenchmarkStats:
    """One run's lines on one benchmark with their intervals, and each line's bootstrap replicates."""

    values: dict[str, float]
    intervals: dict[str, Interval]  # one per line: Wilson for a declared proportion, else the bootstrap
    resamples: int
    seed: int
    ids: tuple[str, ...]  # the rows resampled, in order
    replicates: dict[str, np.ndarray] = field(repr=False)
    group: str | None = None  # resampled by groups of this row.extra field

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def overall(self) -> np.ndarray:
        return self.replicates[next(iter(self.values))]

    def as_dict(self) -> dict[str, Any]:
        """For ``results.json``: level, resamples, seed and each line's interval."""
        return {
            "level": LEVEL,
            "resamples": self.resamples,
            "seed": self.seed,
            "n": self.n,
            "group": self.group,
            "lines": {label: iv.as_dict() for label, iv in self.intervals.items()},
        }


def benchmark_stats(
    name: str,
    aggregate: Aggregate,
    rows: Sequence[BenchmarkRow],
    scores: Sequence[float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    group: str | None = None,
    declared: frozenset[str] = frozenset(),
) -> BenchmarkStats:
    """Each line's value and its one 95% interval: Wilson where the adapter declares the line a
    proportion (``declared``, :func:`proportions`) and it is one here (0/1 scores of independent rows,
    the value their share scored 1), else the bootstrap percentile interval of the adapter's aggregate
    over resampled rows (whole groups of rows with ``group``, see :class:`Units`)."""
    if not rows:
        raise ValueError(f"{name}: no rows to resample")
    summary = aggregate(list(rows), list(scores))
    values = summary_lines(summary)
    units = Units(rows, group)
    picks = resample_indices(len(units.members), resamples, seed, name)
    reps = _replicates(aggregate, units, scores, picks, list(values))
    intervals = {label: iv for label, r in reps.items() if (iv := percentile_interval(r)) is not None}
    for label, where in proportion_lines(summary, declared).items():
        picked = _proportion_rows(where, rows, scores)
        # one only where it is one here: 0/1 scores of independent rows, the value their share (not,
        # e.g., a share of an official scorer's denominator); else the bootstrap stands
        is_share = bool(picked) and math.isclose(values[label], mean(picked), rel_tol=0, abs_tol=1e-12)
        if units.independent and _binary(picked) and is_share:
            intervals[label] = wilson(round(sum(picked)), len(picked))
    return BenchmarkStats(values, intervals, resamples, seed, tuple(r.id for r in rows), reps, group)


@dataclass
class PairedStats:
    """Run B against run A on the rows both scored: differences (B - A) with paired-bootstrap intervals."""

    deltas: dict[str, float]
    intervals: dict[str, Interval]
    n: int
    only_a: list[str]
    only_b: list[str]
    disagree: list[tuple[str, float, float]]  # (id, score in A, score in B)
    mcnemar: McNemar | None
    overall: np.ndarray = field(repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "deltas": self.deltas,
            "intervals": {label: iv.as_dict() for label, iv in self.intervals.items()},
            "only_in_base": self.only_a,
            "only_in_run": self.only_b,
            "disagree": [{"id": i, "base": a, "run": b} for i, a, b in self.disagree],
            "mcnemar": None if self.mcnemar is None else self.mcnemar.as_dict(),
        }


def paired_stats(
    name: str,
    aggregate: Aggregate,
    rows: Sequence[BenchmarkRow],
    scores_a: Mapping[str, float],
    scores_b: Mapping[str, float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    group: str | None = None,
    known: tuple[BenchmarkStats | None, BenchmarkStats | None] = (None, None),
    aggregate_b: Aggregate | None = None,
) -> PairedStats:
    """Compare two runs' per-row scores (by id) on ``rows``: rows scored by one run only are listed,
    not used; the rest are resampled together (whole groups with ``group``) and aggregated for both runs.
    McNemar's test needs independent rows: with groups of several rows there is none.

    ``known``: the runs' own :func:`benchmark_stats`; where one was made on exactly the shared rows (the
    usual case) its replicates are these resamples already and are reused instead of recomputed.
    ``aggregate_b``: run B's aggregate where it is not ``aggregate`` (an adapter given each run's own
    predictions, :func:`videorl.eval.scoring.aggregator`)."""
    only_a = [r.id for r in rows if r.id in scores_a and r.id not in scores_b]
    only_b = [r.id for r in rows if r.id in scores_b and r.id not in scores_a]
    common = [r for r in rows if r.id in scores_a and r.id in scores_b]
    if not common:
        raise ValueError(f"{name}: the two runs scored no row in common")
    a = [float(scores_a[r.id]) for r in common]
    b = [float(scores_b[r.id]) for r in common]
    values_a = summary_lines(aggregate(common, a))
    aggregate_b = aggregate_b or aggregate
    values_b = summary_lines(aggregate_b(common, b))
    labels = [label for label in values_a if label in values_b]
    deltas = {label: values_b[label] - values_a[label] for label in labels}
    units = Units(common, group)
    picks = resample_indices(len(units.members), resamples, seed, name)
    ids = tuple(r.id for r in common)

    def replicates(
        run: Aggregate, scores: list[float], stats: BenchmarkStats | None
    ) -> dict[str, np.ndarray]:
        same = stats is not None and (stats.ids, stats.resamples, stats.seed) == (ids, resamples, seed)
        if stats is not None and same and all(label in stats.replicates for label in labels):
            return stats.replicates
        return _replicates(run, units, scores, picks, labels)

    reps_a, reps_b = replicates(aggregate, a, known[0]), replicates(aggregate_b, b, known[1])
    intervals = {
        label: iv
        for label in labels
        if (iv := percentile_interval(reps_b[label] - reps_a[label])) is not None
    }
    disagree = [(r.id, x, y) for r, x, y in zip(common, a, b, strict=True) if x != y]
    test = None
    if units.independent and _binary(a) and _binary(b):
        test = mcnemar(sum(1 for _, x, y in disagree if x > y), sum(1 for _, x, y in disagree if y > x))
    overall = labels[0]
    return PairedStats(
        deltas, intervals, len(common), only_a, only_b, disagree, test, reps_b[overall] - reps_a[overall]
    )
