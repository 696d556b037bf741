"""Intervals and paired tests (videorl.eval.stats) against values computed by hand."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from videorl.benchmark import BenchmarkRow
from videorl.eval.aggregate import benchmark_summary, breakdown, group_means, macro_mean, mean
from videorl.eval.stats import (
    Interval,
    ResampleError,
    benchmark_stats,
    mcnemar,
    paired_stats,
    proportions,
    resample_indices,
    wilson,
)


def accuracy(rows: list[BenchmarkRow], scores: list[float]) -> dict[str, Any]:
    return benchmark_summary(mean(scores), breakdown(rows, scores))


def task_macro(rows: list[BenchmarkRow], scores: list[float]) -> dict[str, Any]:
    """MVBench's rule: the mean of the per-task accuracies, the pooled accuracy as a further metric."""
    return benchmark_summary(
        macro_mean(group_means(rows, scores, "task")),
        breakdown(rows, scores),
        metrics={"pooled": mean(scores)},
    )


def _rows(n: int, **categories: str) -> list[BenchmarkRow]:
    return [BenchmarkRow(f"r{i}", "q", "A", categories=dict(categories)) for i in range(n)]


def test_wilson_against_textbook_values() -> None:
    # 7/10: the Wilson 95% interval is [0.3968, 0.8922]; 0/10: [0, 0.2775]; 2/2: [1 / (1 + z²/2), 1]
    assert (wilson(7, 10).low, wilson(7, 10).high) == (
        pytest.approx(0.3968, abs=1e-4),
        pytest.approx(0.8922, abs=1e-4),
    )
    assert (wilson(0, 10).low, wilson(0, 10).high) == (0.0, pytest.approx(0.2775, abs=1e-4))
    assert wilson(2, 2).low == pytest.approx(1 / (1 + 1.959964**2 / 2), abs=1e-6)
    assert wilson(2, 2).high == 1.0


def test_mcnemar_exact_and_chi_square() -> None:
    # 4 rows right only in A, 6 only in B: 2 × P(X ≤ 4), X ~ Bin(10, 1/2) = 2 × (1+10+45+120+210)/1024
    assert mcnemar(4, 6).p == pytest.approx(2 * 386 / 1024) and mcnemar(4, 6).method == "exact"
    assert mcnemar(0, 2).p == pytest.approx(0.5)
    assert mcnemar(3, 3).p == 1.0
    assert mcnemar(0, 0).p == 1.0
    # 40 discordant rows: chi² = (|10 - 30| - 1)² / 40 = 9.025, p = P(chi²₁ > 9.025) = 0.002663
    test = mcnemar(10, 30)
    assert test.method == "chi2" and test.p == pytest.approx(0.002663, abs=1e-6)


def _two_runs(n: int, base_right: int, wins: int, losses: int) -> tuple[dict[str, float], dict[str, float]]:
    """Run A right on the first ``base_right`` rows; run B loses ``losses`` of them and wins ``wins``
    others."""
    a = {f"r{i}": float(i < base_right) for i in range(n)}
    b = dict(a)
    for i in range(losses):
        b[f"r{i}"] = 0.0
    for i in range(wins):
        b[f"r{base_right + i}"] = 1.0
    return a, b


def _exact_paired_quantiles(n: int, wins: int, losses: int) -> tuple[float, float]:
    """The 2.5% and 97.5% quantiles of (W - L) / n, (W, L, rest) ~ Multinomial(n; wins/n, losses/n, ...)."""
    pw, pl = wins / n, losses / n
    dist: dict[int, float] = {}
    for w in range(n + 1):
        for ell in range(n - w + 1):
            p = math.comb(n, w) * math.comb(n - w, ell) * pw**w * pl**ell * (1 - pw - pl) ** (n - w - ell)
            dist[w - ell] = dist.get(w - ell, 0.0) + p
    cumulative, low, high = 0.0, None, None
    for d in sorted(dist):
        cumulative += dist[d]
        if low is None and cumulative >= 0.025:
            low = d
        if high is None and cumulative >= 0.975:
            high = d
    assert low is not None and high is not None
    return low / n, high / n


def test_a_two_point_gain_on_100_rows_is_not_significant() -> None:
    rows = _rows(100)
    a, b = _two_runs(100, base_right=50, wins=6, losses=4)
    paired = paired_stats("bench", accuracy, rows, a, b, resamples=2000, seed=0)
    label = "overall (accuracy)"
    assert paired.deltas[label] == pytest.approx(0.02)
    low, high = _exact_paired_quantiles(100, 6, 4)  # -0.04 and +0.08
    assert (low, high) == (pytest.approx(-0.04), pytest.approx(0.08))
    interval = paired.intervals[label]
    assert interval.low == pytest.approx(low, abs=0.011) and interval.high == pytest.approx(high, abs=0.011)
    assert not interval.excludes_zero
    assert paired.mcnemar is not None and (paired.mcnemar.b, paired.mcnemar.c) == (4, 6)
    assert paired.mcnemar.p == pytest.approx(0.75390625)
    assert [d[0] for d in paired.disagree] == [
        "r0",
        "r1",
        "r2",
        "r3",
        "r50",
        "r51",
        "r52",
        "r53",
        "r54",
        "r55",
    ]
    assert paired.disagree[0] == ("r0", 1.0, 0.0) and paired.n == 100


def test_a_two_point_gain_on_1000_rows_is_significant() -> None:
    rows = _rows(1000)
    a, b = _two_runs(1000, base_right=500, wins=30, losses=10)
    paired = paired_stats("bench", accuracy, rows, a, b, resamples=2000, seed=0)
    label = "overall (accuracy)"
    assert paired.deltas[label] == pytest.approx(0.02)
    # per row d = +1 (p .03), -1 (p .01), 0: E d = .02, Var d = .04 - .0004; sd of the mean = sqrt(.0396/1000)
    sd = math.sqrt(0.0396 / 1000)
    interval = paired.intervals[label]
    assert interval.low == pytest.approx(0.02 - 1.96 * sd, abs=0.002)  # 0.0077
    assert interval.high == pytest.approx(0.02 + 1.96 * sd, abs=0.002)  # 0.0323
    assert interval.excludes_zero
    assert paired.mcnemar is not None and paired.mcnemar.p == pytest.approx(0.002663, abs=1e-6)


def test_macro_average_is_resampled_as_the_adapters_aggregate() -> None:
    """Task a: 2 rows, both right; task b: 8 rows, all wrong. Overall (macro) = 0.5, pooled = 0.2.

    A resample scores 0.5 when it draws both tasks, 0 when it draws no row of task a (P = 0.8^10 =
    0.107), 1 when it draws only task a (P = 0.2^10): the 95% interval is [0, 0.5] exactly. A plain mean
    of the rows would centre on 0.2 instead."""
    rows = [BenchmarkRow(f"a{i}", "q", "A", categories={"task": "a"}) for i in range(2)]
    rows += [BenchmarkRow(f"b{i}", "q", "A", categories={"task": "b"}) for i in range(8)]
    scores = [1.0, 1.0] + [0.0] * 8
    declared = frozenset({"pooled", "task"})
    stats = benchmark_stats(
        "mvbench-like", task_macro, rows, scores, resamples=2000, seed=0, declared=declared
    )
    assert stats.values["overall (accuracy)"] == 0.5 and stats.values["pooled"] == pytest.approx(0.2)
    assert stats.intervals["overall (accuracy)"] == Interval(0.0, 0.5, "bootstrap")
    # the pooled accuracy and each task's accuracy are proportions: Wilson (2/10, 2/2, 0/8)
    assert stats.intervals["pooled"] == wilson(2, 10)
    assert stats.intervals["task: a"] == wilson(2, 2)
    assert stats.intervals["task: b"] == wilson(0, 8)
    record = stats.as_dict()
    assert (record["resamples"], record["seed"], record["level"], record["n"]) == (2000, 0, 0.95, 10)
    assert record["lines"]["overall (accuracy)"] == {"low": 0.0, "high": 0.5, "method": "bootstrap"}
    w = wilson(2, 10)
    assert record["lines"]["pooled"] == {"low": w.low, "high": w.high, "method": "wilson"}  # one interval


def test_the_method_follows_the_declaration_not_a_coincidence_of_values() -> None:
    """Balanced tasks (5 rows each, 4/5 and 2/5 right): the macro average 0.6 equals the pooled accuracy
    6/10, yet it is an aggregate and gets the bootstrap; the declared proportions get Wilson, one each."""
    rows = [BenchmarkRow(f"{t}{i}", "q", "A", categories={"task": t}) for t in "ab" for i in range(5)]
    scores = [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    stats = benchmark_stats(
        "b", task_macro, rows, scores, resamples=200, declared=frozenset({"pooled", "task"})
    )
    assert stats.values["overall (accuracy)"] == pytest.approx(stats.values["pooled"])
    assert stats.intervals["overall (accuracy)"].method == "bootstrap"
    assert stats.intervals["pooled"] == wilson(6, 10)
    assert (stats.intervals["task: a"], stats.intervals["task: b"]) == (wilson(4, 5), wilson(2, 5))
    undeclared = benchmark_stats("b", task_macro, rows, scores, resamples=200)  # nothing declared
    assert {iv.method for iv in undeclared.intervals.values()} == {"bootstrap"}
    every = benchmark_stats(
        "b", accuracy, rows, scores, resamples=200, declared=frozenset({"overall", "categories"})
    )
    assert every.intervals["overall (accuracy)"] == wilson(6, 10) and every.intervals["task: b"] == wilson(
        2, 5
    )
    partial = benchmark_stats("b", accuracy, rows, [0.5] * 10, resamples=200, declared=frozenset({"overall"}))
    assert partial.intervals["overall (accuracy)"].method == "bootstrap"  # partial scores: not a proportion


def test_proportions_must_be_names() -> None:
    class Bad:
        proportions = "overall"  # a string, not a collection of names

    with pytest.raises(TypeError, match=r"Bad.proportions must be a collection of figure names"):
        proportions(Bad())
    assert proportions(object()) == frozenset()


def test_resampling_is_seeded_per_benchmark() -> None:
    assert (resample_indices(50, 10, 0, "x") == resample_indices(50, 10, 0, "x")).all()
    assert not (resample_indices(50, 10, 0, "x") == resample_indices(50, 10, 1, "x")).all()
    assert not (resample_indices(50, 10, 0, "x") == resample_indices(50, 10, 0, "y")).all()
    rows = _rows(30)
    scores = [0.25 * (i % 5) for i in range(30)]  # not a proportion: bootstrap only
    one = benchmark_stats("x", accuracy, rows, scores, resamples=300, seed=3)
    two = benchmark_stats("x", accuracy, rows, scores, resamples=300, seed=3)
    assert one.intervals == two.intervals and one.intervals["overall (accuracy)"].method == "bootstrap"


def test_rows_scored_by_one_run_only_are_named_not_used() -> None:
    rows = _rows(6)
    a = {f"r{i}": 1.0 for i in range(5)}  # r5 not scored by A
    b = {f"r{i}": 1.0 for i in range(1, 6)}  # r0 not scored by B
    b["r2"] = 0.0
    paired = paired_stats("x", accuracy, rows, a, b, resamples=200)
    assert (paired.only_a, paired.only_b, paired.n) == (["r0"], ["r5"], 4)
    assert paired.deltas["overall (accuracy)"] == pytest.approx(-0.25)  # r1..r4: 4/4 vs 3/4
    assert paired.disagree == [("r2", 1.0, 0.0)]
    with pytest.raises(ValueError, match="no row in common"):
        paired_stats("x", accuracy, rows, {"r0": 1.0}, {"r1": 1.0})


def test_an_aggregate_that_cannot_take_a_resample_is_an_error_not_a_guess() -> None:
    def groups_of_two(rows: list[BenchmarkRow], scores: list[float]) -> dict[str, Any]:
        if len({r.id for r in rows}) != len(rows):
            raise KeyError("row drawn twice")
        return benchmark_summary(mean(scores), {})

    with pytest.raises(ResampleError, match=r"failed on a bootstrap resample .*KeyError"):
        benchmark_stats("x", groups_of_two, _rows(5), [1.0] * 5, resamples=10)


def _all_right(rows: list[BenchmarkRow], scores: list[float]) -> dict[str, Any]:
    """VideoMathQA's multi-binary rule: a question counts when all its rows are right."""
    groups: dict[Any, list[float]] = {}
    for row, score in zip(rows, scores, strict=True):
        groups.setdefault(row.extra["question"], []).append(score)
    return benchmark_summary(mean(float(all(s == 1.0 for s in g)) for g in groups.values()), {})


def test_grouped_rows_are_resampled_as_whole_groups() -> None:
    """20 questions of 3 rows; 6 questions all right, the other 14 two of three right: overall 6/20 = 0.3.

    Resampling whole questions, a resample's overall is Bin(20, 0.3) / 20, whose 2.5% and 97.5%
    quantiles are 2 and 10 (P(X ≤ 1) = .008, P(X ≤ 2) = .035; P(X ≤ 9) = .952, P(X ≤ 10) = .983):
    [0.10, 0.50]. Resampling rows instead cuts questions apart (a question missing its wrong row counts
    as right) and moves the interval up, off the figure itself."""
    rows = [BenchmarkRow(f"q{q}#{k}", "?", "A", extra={"question": q}) for q in range(20) for k in range(3)]
    scores = [1.0 if q < 6 or k < 2 else 0.0 for q in range(20) for k in range(3)]
    grouped = benchmark_stats("vmqa", _all_right, rows, scores, resamples=2000, group="question")
    assert grouped.values["overall (accuracy)"] == pytest.approx(0.3)
    interval = grouped.intervals["overall (accuracy)"]
    assert (interval.low, interval.high) == (pytest.approx(0.10, abs=0.011), pytest.approx(0.50, abs=0.011))
    by_row = benchmark_stats("vmqa", _all_right, rows, scores, resamples=2000).intervals["overall (accuracy)"]
    assert by_row.low > 0.3  # the biased interval the groups avoid
    assert grouped.as_dict()["group"] == "question"


def test_a_group_drawn_twice_is_two_groups() -> None:
    from videorl.eval.stats import Units

    rows = [BenchmarkRow(f"{g}-{k}", "?", "A", extra={"group": g}) for g in (0, 1) for k in range(2)]
    units = Units(rows, "group")
    assert units.members == [[0, 1], [2, 3]] and not units.independent
    drawn, scores = units.draw(np.array([1, 1, 0]), [1.0, 0.0, 0.5, 0.25])
    # int values: the second copy of group 1 becomes 1 + 1 × (2 × max|value| + 1) = 4
    assert [r.extra["group"] for r in drawn] == [1, 1, 4, 4, 0, 0]
    assert [r.id for r in drawn] == ["1-0", "1-1", "1-0", "1-1", "0-0", "0-1"]
    assert scores == [0.5, 0.25, 0.5, 0.25, 1.0, 0.0]
    named = Units([BenchmarkRow("a", "?", "A", extra={"question": "x"})], "question")
    assert [r.extra["question"] for r in named.draw(np.array([0, 0]), [1.0])[0]] == ["x", "x#1"]
    assert rows[2].extra["group"] == 1  # the rows themselves are not changed


def test_grouped_rows_get_no_wilson_and_no_mcnemar() -> None:
    """Rows of one group are not independent draws: a proportion's Wilson interval and McNemar's test
    would be too narrow, so only the (group) bootstrap is given."""
    rows = [BenchmarkRow(f"q{q}#{k}", "?", "A", extra={"question": q}) for q in range(10) for k in range(2)]
    a = {r.id: 1.0 for r in rows}
    b = {**a, "q0#0": 0.0}
    stats = benchmark_stats("g", accuracy, rows, [1.0] * 20, resamples=100, group="question")
    assert stats.intervals["overall (accuracy)"].method == "bootstrap"
    paired = paired_stats("g", accuracy, rows, a, b, resamples=100, group="question")
    assert paired.mcnemar is None and paired.disagree == [("q0#0", 1.0, 0.0)]
    assert paired_stats("g", accuracy, rows, a, b, resamples=100).mcnemar is not None
