"""The 95% intervals on the first-party adapters that score rows in groups (Video-MME v2, VideoMathQA):
their ``resample_group`` makes the bootstrap resample whole groups, with values computed by hand."""

from __future__ import annotations

from typing import Any

import pytest

from videorl.benchmark import BenchmarkRow
from videorl.eval.compare import benchmark_comparison
from videorl.eval.stats import ResampleError, benchmark_stats, resample_group
from videorl.plugins import load_plugins


def _create(name: str) -> Any:
    return load_plugins().benchmarks.create(name)


def test_video_mme_v2_resamples_groups_of_four() -> None:
    """10 relevance groups of 4 questions: 5 all right (group score 1), 5 all wrong (0): overall 0.5.

    A resample of whole groups scores Bin(10, 1/2) / 10: P(X ≤ 1) = 11/1024, P(X ≤ 2) = 56/1024,
    P(X ≤ 7) = 968/1024, P(X ≤ 8) = 1013/1024, so the 95% interval is [0.2, 0.8]. Resampling rows
    instead puts a group's row in it twice and the adapter refuses (a group of five)."""
    bench = _create("video-mme-v2")
    assert resample_group(bench) == "group"
    rows = [
        BenchmarkRow(f"{g}-{k}", "?", "A", categories={"group_type": "relevance"},
                     extra={"group": g, "group_structure": "[1, 2, 3, 4]"})
        for g in range(10) for k in range(4)
    ]  # fmt: skip
    scores = [1.0 if g < 5 else 0.0 for g in range(10) for _ in range(4)]
    stats = benchmark_stats("video-mme-v2", bench.aggregate, rows, scores, resamples=2000, group="group")
    assert stats.values["overall (group score)"] == 0.5
    interval = stats.intervals["overall (group score)"]
    assert (interval.low, interval.high, interval.method) == (
        pytest.approx(0.2),
        pytest.approx(0.8),
        "bootstrap",
    )
    with pytest.raises(ResampleError, match="failed on a bootstrap resample"):
        benchmark_stats("video-mme-v2", bench.aggregate, rows, scores, resamples=50)
    # the comparison takes the group from the adapter: run B loses group 0 entirely (-0.1)
    base = dict(zip((r.id for r in rows), scores, strict=True))
    other = {**base, **{f"0-{k}": 0.0 for k in range(4)}}
    report = benchmark_comparison(bench, rows, [base, other], resamples=500)
    paired = report.paired[0]
    assert paired is not None and paired.deltas["overall (group score)"] == pytest.approx(-0.1)
    assert paired.mcnemar is None  # rows of a group are not independent
    assert report.runs[0] is not None and report.runs[0].group == "group"


def test_videomathqa_resamples_multi_binary_questions() -> None:
    """20 multi-binary questions of 3 sub-questions; 6 all right, 14 two of three: MBin = 6/20 = 0.3.

    Whole questions resampled: Bin(20, 0.3) / 20, quantiles 2/20 and 10/20 (P(X ≤ 1) = .008,
    P(X ≤ 2) = .035, P(X ≤ 9) = .952, P(X ≤ 10) = .983): [0.10, 0.50]."""
    bench = _create("videomathqa")
    group = resample_group(bench)
    assert group == "question"
    rows = [
        BenchmarkRow(f"q{q}#{k}", "?", "A", categories={"category": "x", "length": "short"},
                     extra={"format": "mbin", "question": f"q{q}"})
        for q in range(20) for k in range(3)
    ]  # fmt: skip
    scores = [1.0 if q < 6 or k < 2 else 0.0 for q in range(20) for k in range(3)]
    stats = benchmark_stats("videomathqa", bench.aggregate, rows, scores, resamples=2000, group=group)
    assert stats.values["MBin"] == pytest.approx(0.3)
    interval = stats.intervals["MBin"]
    assert (interval.low, interval.high) == (pytest.approx(0.10, abs=0.011), pytest.approx(0.50, abs=0.011))
