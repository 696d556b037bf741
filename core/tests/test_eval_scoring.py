"""Scoring with failure accounting and aggregation helpers, on a small benchmark defined here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from videorl.benchmark import BenchmarkRow
from videorl.eval import (
    Prediction,
    benchmark_summary,
    breakdown,
    group_means,
    macro_mean,
    mean,
    score_predictions,
    summarize,
)
from videorl.eval.compare import benchmark_comparison
from videorl.eval.scoring import aggregator


class Letters:
    """Multiple choice by exact letter; row "boom" makes the scorer raise (an adapter bug)."""

    name = "letters"

    def load(self, data_root: Path) -> list[BenchmarkRow]:
        raise NotImplementedError

    def build_prompt(self, row: BenchmarkRow, *, family: str | None, thinking: bool) -> str:
        return row.problem

    def extract(self, row: BenchmarkRow, response: str) -> Any:
        if row.id == "boom":
            raise RuntimeError("adapter bug")
        return response.strip() or None

    def score(self, row: BenchmarkRow, prediction: Any) -> float:
        return float(prediction == row.answer)

    def aggregate(self, rows: list[BenchmarkRow], scores: list[float]) -> dict[str, Any]:
        return benchmark_summary(mean(scores), breakdown(rows, scores))


def _row(i: str, answer: str, kind: str, problem_type: str = "multiple_choice") -> BenchmarkRow:
    return BenchmarkRow(
        id=i, problem="?", answer=answer, problem_type=problem_type, categories={"kind": kind}
    )


def _pred(i: str, response: str | None, error: str | None = None, judge: float | None = None) -> Prediction:
    return Prediction(i, response, error, judge)


def test_failures_count_as_wrong_and_are_listed() -> None:
    rows = [
        _row("1", "A", "x"),
        _row("2", "B", "x"),
        _row("3", "C", "y"),
        _row("4", "D", "y"),
        _row("boom", "A", "y"),
        _row("6", "paris", "z", "open_ended"),
    ]
    predictions = {
        "1": _pred("1", "A"),  # right
        "2": _pred("2", None, "engine error: timeout"),  # failed
        # "3" missing
        "4": _pred("4", "D"),  # right
        "boom": _pred("boom", "A"),  # scoring raises
        "6": _pred("6", "it is Paris", judge=1.0),  # the judge overrides the rule-based 0
        "stray": _pred("stray", "A"),
    }
    result = score_predictions(Letters(), rows, predictions)
    assert [r.score for r in result.rows] == [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
    assert result.failed == [
        {"id": "2", "reason": "engine error: timeout"},
        {"id": "3", "reason": "missing prediction"},
        {"id": "boom", "reason": "scoring error: RuntimeError: adapter bug"},
    ]
    assert result.unknown_ids == ["stray"]
    summary = result.summary
    assert summary["overall"] == pytest.approx(3 / 6)  # the denominator keeps every row
    assert summary["n"] == 6 and summary["n_failed"] == 3
    assert summary["categories"] == {"kind": {"x": 0.5, "y": pytest.approx(1 / 3), "z": 1.0}}
    assert result.rows[0].as_dict() == {"id": "1", "score": 1.0, "prediction": "A"}
    assert result.rows[1].as_dict()["failed"] == "engine error: timeout"


def test_judge_score_only_replaces_open_ended_scores() -> None:
    rows = [_row("1", "A", "x")]
    result = score_predictions(Letters(), rows, {"1": _pred("1", "B", judge=1.0)})
    assert result.summary["overall"] == 0.0


class ReadLetters(Letters):
    """Its official figure leaves out the rows it read no letter from ("?"), as Video-MME's script does."""

    aggregates_predictions = True

    def aggregate(
        self, rows: list[BenchmarkRow], scores: list[float], predictions: list[Any] | None = None
    ) -> dict[str, Any]:
        kept = [s for s, p in zip(scores, predictions or [None] * len(scores), strict=True) if p != "?"]
        return benchmark_summary(mean(kept), {})


def test_an_adapter_that_aggregates_predictions_gets_them_by_row() -> None:
    """4 rows: right, wrong, unread ("?"), failed. Official accuracy over the rows read: 1 / 3 (the failed
    row stays in); every row given the same figure by a bootstrap resample and by ``eval compare``."""
    rows = [_row(i, "A", "x") for i in "1234"]
    saved = {"1": _pred("1", "A"), "2": _pred("2", "B"), "3": _pred("3", "?"), "4": _pred("4", None, "oom")}
    result = score_predictions(ReadLetters(), rows, saved)
    assert result.summary["overall"] == pytest.approx(1 / 3)
    by_id = {r.id: r.prediction for r in result.rows}
    assert by_id == {"1": "A", "2": "B", "3": "?", "4": None}
    # a resample carries its rows' predictions: rows 3, 3, 1 → only row 1 counts → 1.0
    resampled = aggregator(ReadLetters(), by_id)([rows[2], rows[2], rows[0]], [0.0, 0.0, 1.0])
    assert resampled["overall"] == 1.0
    # two runs, each with its own predictions: run B reads row 3 as "A" (right)
    other = {**by_id, "3": "A"}
    scores_a = {r.id: r.score for r in result.rows}
    scores_b = {**scores_a, "3": 1.0}
    report = benchmark_comparison(
        ReadLetters(), rows, [scores_a, scores_b], predictions=[by_id, other], resamples=50
    )
    runs = [run.values["overall (accuracy)"] for run in report.runs if run is not None]
    assert runs == [pytest.approx(1 / 3), pytest.approx(2 / 4)]
    paired = report.paired[0]
    assert paired is not None and paired.deltas["overall (accuracy)"] == pytest.approx(2 / 4 - 1 / 3)
    # an adapter without the attribute is called with rows and scores only, as before
    letters = Letters()
    assert aggregator(letters, by_id) == letters.aggregate


def test_summarize_requires_aligned_results() -> None:
    rows = [_row("1", "A", "x"), _row("2", "A", "x")]
    result = score_predictions(Letters(), rows, {})
    with pytest.raises(ValueError, match="aligned"):
        summarize(Letters(), rows[::-1], result.rows)


def test_aggregation_helpers() -> None:
    rows = [
        BenchmarkRow("1", "?", "A", categories={"type": ["kir", "tg"], "genre": "sport"}),
        BenchmarkRow("2", "?", "A", categories={"type": ["tg"]}),
        BenchmarkRow("3", "?", "A", categories={"type": "rea", "genre": "doc"}),
    ]
    scores = [1.0, 0.0, 1.0]
    assert group_means(rows, scores, "type") == {"kir": 1.0, "rea": 1.0, "tg": 0.5}
    assert breakdown(rows, scores) == {
        "type": {"kir": 1.0, "rea": 1.0, "tg": 0.5},
        "genre": {"doc": 1.0, "sport": 1.0},
    }
    assert macro_mean({"a": 1.0, "b": 0.0, "c": 0.5}) == 0.5
    assert mean([]) == 0.0
    assert benchmark_summary(0.5, {"k": {"v": 1}}, metric="mIoU", metrics={"R@0.5": 0.25}) == {
        "overall": 0.5, "metric": "mIoU", "categories": {"k": {"v": 1.0}}, "metrics": {"R@0.5": 0.25}
    }  # fmt: skip
    with pytest.raises(ValueError, match="2 rows but 1 scores"):
        group_means(rows[:2], [1.0], "type")
