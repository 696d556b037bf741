"""The 95% intervals on the first-party adapters that score rows in groups (Video-MME v2, VideoMathQA):
their ``resample_group`` makes the bootstrap resample whole groups, with values computed by hand."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from videorl.benchmark import BenchmarkRow
from videorl.eval import read_results
from videorl.eval.compare import benchmark_comparison
from videorl.eval.stats import ResampleError, benchmark_stats, resample_group
from videorl.plugins import load_plugins
from videorl.testing import CliResult


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


def _videomme_run(run: Path, responses: list[str]) -> None:
    (run / "video-mme").mkdir(parents=True)
    lines = [json.dumps({"id": f"00{i}-1", "response": r}) for i, r in enumerate(responses, start=1)]
    (run / "video-mme" / "predictions.jsonl").write_text("\n".join(lines) + "\n")


def test_video_mme_official_figure_through_eval_score_and_compare(
    tmp_path: Path, run_cli: Callable[..., CliResult]
) -> None:
    """Video-MME's official figure leaves out the rows its regex reads no capital A-D from; ``eval score``
    and ``eval compare`` (its intervals recomputed from scores.jsonl) must report the same figure.

    Base: "B" right; "Best answer: C" → the "B" of "Best", wrong; "I cannot tell" → no letter, left out;
    "D" right: official 2 / 3, videorl's reading 3 / 4 (C read), one row read differently. The other run
    answers every row right: 4 / 4."""
    data = tmp_path / "data"
    (data / "videomme").mkdir(parents=True)
    rows = [
        {"question_id": f"00{i}-1", "videoID": f"v{i}", "duration": "short", "domain": "d",
         "sub_category": "s", "task_type": "t", "question": "?", "options": ["A. a", "B. b", "C. c", "D. d"],
         "answer": truth}
        for i, truth in enumerate("BCAD", start=1)
    ]  # fmt: skip
    (data / "videomme" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _videomme_run(tmp_path / "base", ["B", "Best answer: C", "I cannot tell", "D"])
    _videomme_run(tmp_path / "other", ["B", "C", "A", "D"])
    for run in ("base", "other"):
        scored = run_cli("eval", "score", "--benchmark", "video-mme", "--data-root", str(data),
                         "--run", str(tmp_path / run), "--resamples", "200")  # fmt: skip
        scored.assert_success()
    lines = scored.output.splitlines()
    assert lines[0].startswith("video-mme: accuracy 100.00% (n=4, failed=0)")
    base = read_results(tmp_path / "base")["benchmarks"]["video-mme"]
    assert base["overall"] == pytest.approx(2 / 3)
    assert base["metrics"] == {"accuracy, videorl's reading": 0.75}
    assert base["readings"] == {"counted": 3, "differ": 1}
    shown = run_cli("eval", "score", "--benchmark", "video-mme", "--data-root", str(data),
                    "--run", str(tmp_path / "base"), "--resamples", "0")  # fmt: skip
    assert shown.output.splitlines()[:3] == [
        "video-mme: accuracy 66.67% (n=4, failed=0)",
        "  accuracy, videorl's reading: 75.00%",
        "  (the official figure counts 3 rows; videorl reads 1 rows differently)",
    ]
    compared = run_cli("eval", "compare", str(tmp_path / "base"), str(tmp_path / "other"),
                       "--data-root", f"video-mme={data}", "--resamples", "200")  # fmt: skip
    compared.assert_success()
    overall = next(line for line in compared.output.splitlines() if "overall (accuracy)" in line)
    assert "66.67" in overall and "100.00" in overall and "+33.33" in overall
    assert "rescore" not in compared.output  # the intervals are of the recorded figures
