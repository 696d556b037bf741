"""Evaluation helpers shared by ``videorl eval`` and the evaluator: predictions files, scoring with
failure accounting, aggregation, the run-directory layout and run comparison."""

from videorl.eval.aggregate import benchmark_summary, breakdown, group_means, group_scores, macro_mean, mean
from videorl.eval.compare import ComparisonRow, compare_results, format_table, plot_comparison, to_markdown
from videorl.eval.predictions import Prediction, append_prediction, read_predictions
from videorl.eval.results import (
    FORMAT,
    PREDICTIONS_FILE,
    RESULTS_FILE,
    SCORES_FILE,
    benchmark_dir,
    predictions_path,
    read_results,
    record_result,
    scores_path,
)
from videorl.eval.scoring import BenchmarkResult, RowResult, score_predictions, score_row, summarize

__all__ = [
    "FORMAT",
    "PREDICTIONS_FILE",
    "RESULTS_FILE",
    "SCORES_FILE",
    "BenchmarkResult",
    "ComparisonRow",
    "Prediction",
    "RowResult",
    "append_prediction",
    "benchmark_dir",
    "benchmark_summary",
    "breakdown",
    "compare_results",
    "format_table",
    "group_means",
    "group_scores",
    "macro_mean",
    "mean",
    "plot_comparison",
    "predictions_path",
    "read_predictions",
    "read_results",
    "record_result",
    "score_predictions",
    "score_row",
    "scores_path",
    "summarize",
    "to_markdown",
]
