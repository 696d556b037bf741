"""The run-directory layout and the comparison of two runs (tables, Markdown, PNG)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from videorl.errors import DataError
from videorl.eval import (
    RowResult,
    compare_results,
    format_table,
    plot_comparison,
    read_results,
    record_result,
    scores_path,
    to_markdown,
)
from videorl.eval.compare import comparison_figure
from videorl.eval.results import read_scores
from videorl.eval.scoring import BenchmarkResult


def _result(name: str, overall: float, categories: dict[str, dict[str, float]]) -> BenchmarkResult:
    rows = [RowResult("1", 1.0, "A"), RowResult("2", 0.0, None, failed="missing prediction")]
    failed = [{"id": "2", "reason": "missing prediction"}]
    summary = {"overall": overall, "metric": "accuracy", "categories": categories, "n": 2, "n_failed": 1,
               "failed": failed}  # fmt: skip
    return BenchmarkResult(name, summary, rows, failed)


def test_record_result_layout(tmp_path: Path) -> None:
    record_result(tmp_path, _result("mvbench", 0.5, {"task": {"a": 0.5}}), settings={"fps": 2.0})
    record_result(tmp_path, _result("lvbench", 0.25, {}))
    data = read_results(tmp_path)
    assert data["format"] == "videorl-eval/1"
    assert data["settings"] == {"fps": 2.0}
    assert list(data["benchmarks"]) == ["mvbench", "lvbench"]
    assert data["benchmarks"]["mvbench"]["n_failed"] == 1
    lines = scores_path(tmp_path, "mvbench").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"id": "1", "score": 1.0, "prediction": "A"},
        {"id": "2", "score": 0.0, "prediction": None, "failed": "missing prediction"},
    ]
    assert not list(tmp_path.rglob("*.tmp"))  # atomic writes leave no temporary files
    with pytest.raises(ValueError, match="cannot be a directory name"):
        scores_path(tmp_path, "../evil")


def test_read_results_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="is .* an evaluation run directory"):
        read_results(tmp_path)
    (tmp_path / "results.json").write_text("{\n  oops")
    with pytest.raises(DataError, match=r"results\.json:2: not valid JSON"):
        read_results(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps({"benchmarks": {"x": {"overall": "high"}}}))
    with pytest.raises(DataError, match="benchmark 'x' has no numeric 'overall'"):
        read_results(tmp_path)


RUN_A = {
    "benchmarks": {
        "mvbench": {"overall": 0.5, "metric": "accuracy", "categories": {"task": {"a": 0.4, "b": 0.6}}},
        "charades-sta": {"overall": 0.3, "metric": "mIoU", "metrics": {"R@0.5": 0.2}, "categories": {}},
        "mlvu": {"overall": 0.7, "metric": "M-Avg", "categories": {}},
    }
}
RUN_B = {
    "benchmarks": {
        "mvbench": {"overall": 0.6, "metric": "accuracy", "categories": {"task": {"a": 0.5, "c": 0.9}}},
        "charades-sta": {"overall": 0.4, "metric": "mIoU", "metrics": {"R@0.5": 0.35}, "categories": {}},
        "vsi-bench": {"overall": 0.2, "metric": "8-task mean", "categories": {}},
    }
}


def test_compare_results_rows_and_deltas() -> None:
    rows = compare_results([RUN_A, RUN_B])
    table = [(r.benchmark, r.label, r.values, r.deltas) for r in rows]
    assert table == [
        ("mvbench", "overall (accuracy)", (0.5, 0.6), (pytest.approx(0.1),)),
        ("mvbench", "task: a", (0.4, 0.5), (pytest.approx(0.1),)),
        ("mvbench", "task: b", (0.6, None), (None,)),
        ("mvbench", "task: c", (None, 0.9), (None,)),
        ("charades-sta", "overall (mIoU)", (0.3, 0.4), (pytest.approx(0.1),)),
        ("charades-sta", "R@0.5", (0.2, 0.35), (pytest.approx(0.15),)),
        ("mlvu", "overall (M-Avg)", (0.7, None), (None,)),
        ("vsi-bench", "overall (8-task mean)", (None, 0.2), (None,)),
        ("average", "overall (2 benchmarks in both runs)", (pytest.approx(0.4), pytest.approx(0.5)),
         (pytest.approx(0.1),)),
    ]  # fmt: skip
    assert all(
        r.intervals == (None, None) and r.delta_intervals == (None,) for r in rows
    )  # no per-row scores
    with pytest.raises(ValueError, match="a base and at least one more run"):
        compare_results([RUN_A])


def test_compare_several_runs_against_the_base() -> None:
    run_c = {"benchmarks": {"mvbench": {"overall": 0.45, "metric": "accuracy", "categories": {}}}}
    rows = compare_results([RUN_A, RUN_B, run_c])
    assert (rows[0].values, rows[0].deltas) == ((0.5, 0.6, 0.45), (pytest.approx(0.1), pytest.approx(-0.05)))
    # one benchmark in all runs: no average repeating its overall
    assert not any(r.benchmark == "average" for r in rows)
    text = format_table(rows, ["base", "rl-100", "rl-200"])
    assert text.splitlines()[0].split() == ["benchmark", "line", "base", "rl-100", "rl-200", "delta",
                                            "rl-100",
                                            "delta", "rl-200"]  # fmt: skip
    assert text.splitlines()[2].split()[-5:] == ["50.00%", "60.00%", "45.00%", "+10.00", "-5.00"]
    assert "values in %, differences (delta) in points" in text


def test_text_and_markdown_tables() -> None:
    rows = compare_results([RUN_A, RUN_B])
    text = format_table(rows, ["base", "rl"])
    assert text.splitlines()[0].split() == ["benchmark", "line", "base", "rl", "delta"]
    assert "mvbench       overall (accuracy)" in text and "50.00%  60.00%  +10.00" in text
    md = to_markdown(rows, ["base", "rl"])
    assert md.splitlines()[:3] == [
        "| benchmark | line | base | rl | delta |",
        "|---|---|---:|---:|---:|",
        "| **mvbench** | **overall (accuracy)** | **50.00%** | **60.00%** | **+10.00** |",
    ]
    assert "| mvbench | task: b | 60.00% | - | - |" in md


@pytest.mark.slow
def test_png_bar_chart(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "cmp.png"
    plot_comparison(compare_results([RUN_A, RUN_B]), out, ["base", "rl"])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _texts(ax: Any) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_png_has_a_panel_per_benchmark_with_its_categories_labelled() -> None:
    pytest.importorskip("matplotlib")
    fig = comparison_figure(compare_results([RUN_A, RUN_B]), ["base", "rl"])
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [
        "mvbench: accuracy (%)",
        "charades-sta: mIoU (%)",
        "mlvu: M-Avg (%)",
        "vsi-bench: 8-task mean (%)",
        "average: 2 benchmarks in both runs (%)",  # two benchmarks in both runs: an average panel
    ]
    mvbench = fig.axes[0]
    ticks = [t.get_text() for t in mvbench.get_xticklabels()]
    assert ticks == ["overall (accuracy)", "task: a", "task: b", "task: c"]
    # each bar labelled: the base's value; the run's value and its delta in points; "-" where absent
    assert _texts(mvbench) == ["50.0", "40.0", "60.0", "-", "60.0\n+10.0", "50.0\n+10.0", "-", "90.0"]
    assert _texts(fig.axes[1]) == ["30.0", "20.0", "40.0\n+10.0", "35.0\n+15.0"]
    mlvu = RUN_A["benchmarks"]["mlvu"]
    runs = [{"benchmarks": {"mlvu": mlvu}}, {"benchmarks": {"mlvu": {**mlvu, "overall": 0.75}}}]
    one = comparison_figure(compare_results(runs), ["a", "b"])
    assert [ax.get_title() for ax in one.axes] == ["mlvu: M-Avg (%)"]  # one benchmark: no average panel
    assert _texts(one.axes[0]) == ["70.0", "75.0\n+5.0"]


def test_read_scores(tmp_path: Path) -> None:
    record_result(tmp_path, _result("mvbench", 0.5, {}))
    assert read_scores(tmp_path, "mvbench") == {"1": 1.0, "2": 0.0}
    assert read_scores(tmp_path, "lvbench") is None
    scores_path(tmp_path, "mvbench").write_text('{"id": "1", "score": 1.0}\n{"id": "2"}\n')
    with pytest.raises(DataError, match=r"mvbench/scores.jsonl:2: expected \{"):
        read_scores(tmp_path, "mvbench")


def test_importing_eval_does_not_import_matplotlib() -> None:
    import subprocess
    import sys

    code = "import sys, videorl.eval, videorl.commands.eval; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
