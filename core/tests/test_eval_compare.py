"""``videorl eval score`` and ``videorl eval compare`` with intervals and paired tests, end to end:
real prediction files, scored and compared through the CLI, checked against values computed by hand."""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from videorl.eval import read_results
from videorl.testing import CliResult

PLUGIN = textwrap.dedent(
    '''
    import json
    from pathlib import Path

    from videorl.api import (
        BenchmarkRow, benchmark_summary, breakdown, group_means, hookimpl, macro_mean, mean,
    )


    class Quiz:
        """Rows from questions.json: {"id", "answer", "task"}; overall = the mean of the task accuracies."""

        name = "quiz"
        proportions = ("pooled", "task")  # the overall, a macro average, is not one

        def load(self, data_root):
            questions = json.loads((Path(data_root) / "questions.json").read_text())
            return [
                BenchmarkRow(q["id"], "?", q["answer"], categories={"task": q["task"]}) for q in questions
            ]

        def build_prompt(self, row, *, family, thinking):
            return row.problem

        def extract(self, row, response):
            return response.strip() or None

        def score(self, row, prediction):
            return float(prediction == row.answer)

        def aggregate(self, rows, scores):
            return benchmark_summary(
                macro_mean(group_means(rows, scores, "task")), breakdown(rows, scores),
                metrics={"pooled": mean(scores)},
            )


    class Strict(Quiz):
        """An aggregate that refuses a row twice (as one scoring rows in fixed groups might)."""

        name = "strict"

        def aggregate(self, rows, scores):
            if len({r.id for r in rows}) < len(rows):
                raise ValueError("a row appears twice")
            return super().aggregate(rows, scores)


    @hookimpl
    def register_benchmarks(register):
        register("quiz", Quiz)
        register("strict", Strict)
    '''
)


@pytest.fixture
def quiz(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "quiz_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _data(root: Path, tasks: Sequence[str]) -> Path:
    root.mkdir(parents=True)
    questions = [{"id": f"r{i}", "answer": "A", "task": task} for i, task in enumerate(tasks)]
    (root / "questions.json").write_text(json.dumps(questions))
    return root


def _score(
    run_cli: Callable[..., CliResult], run: Path, data: Path, right: Sequence[int], n: int, *extra: str
) -> CliResult:
    """Write RUN/quiz/predictions.jsonl (rows ``right`` answered "A", the others "B") and score it."""
    (run / "quiz").mkdir(parents=True)
    right_set = set(right)
    lines = [json.dumps({"id": f"r{i}", "response": "A" if i in right_set else "B"}) for i in range(n)]
    (run / "quiz" / "predictions.jsonl").write_text("\n".join(lines) + "\n")
    result = run_cli("--plugin", "quiz_plugin", "eval", "score", "--benchmark", "quiz", "--data-root",
                     str(data),
                     "--run", str(run), *extra)  # fmt: skip
    result.assert_success()
    return result


def _numbers(line: str) -> list[float]:
    return [float(x) for x in re.findall(r"[-+]?\d+\.\d+", line)]


def test_score_prints_and_records_intervals(
    quiz: Path, tmp_path: Path, run_cli: Callable[..., CliResult]
) -> None:
    """Task a: 2 rows, both right; task b: 8 rows, all wrong. Overall (the macro mean) = 50, pooled = 20.

    The bootstrap of the macro mean is [0, 50] exactly: a resample without a task-a row (P = 0.8^10 =
    0.107 > 0.025) scores 0, one with rows of both tasks 50 (only task a: P = 0.2^10). The pooled accuracy
    and the task accuracies are proportions: Wilson 2/10 = [5.67, 50.98], 2/2 = [34.24, 100], 0/8 = [0,
    32.44].
    """
    data = _data(tmp_path / "data", ["a"] * 2 + ["b"] * 8)
    result = _score(run_cli, tmp_path / "run", data, [0, 1], 10, "--resamples", "500", "--seed", "7")
    lines = result.output.splitlines()
    assert lines[0] == "quiz: accuracy 50.00% (n=10, failed=0)  [0.00%, 50.00%] bootstrap"
    assert lines[1] == "  pooled: 20.00%  [5.67%, 50.98%] wilson"
    assert lines[3] == "    a: 100.00%  [34.24%, 100.00%] wilson"
    assert lines[4] == "    b: 0.00%  [0.00%, 32.44%] wilson"
    assert "500 bootstrap resamples of the rows, seed 7" in lines[5]
    intervals = read_results(tmp_path / "run")["benchmarks"]["quiz"]["intervals"]
    assert (intervals["resamples"], intervals["seed"], intervals["level"]) == (500, 7, 0.95)
    assert intervals["lines"]["overall (accuracy)"] == {"low": 0.0, "high": 0.5, "method": "bootstrap"}
    assert intervals["lines"]["pooled"]["low"] == pytest.approx(0.0567, abs=1e-4)

    plain = run_cli("--plugin", "quiz_plugin", "eval", "score", "--benchmark", "quiz", "--data-root",
                    str(data),
                    "--run", str(tmp_path / "run"), "--resamples", "0")  # fmt: skip
    plain.assert_success()
    assert plain.output.splitlines()[0] == "quiz: accuracy 50.00% (n=10, failed=0)"


@pytest.mark.slow
def test_compare_two_gains_of_two_points(
    quiz: Path, tmp_path: Path, run_cli: Callable[..., CliResult]
) -> None:
    """1000 rows, one task; the base is right on rows 0-499 (50%). Both checkpoints score 52%:

    - ckpt-noisy wins 110 rows and loses 90: per row d = +1 (p .11), -1 (p .09), 0; Var d = .2 - .02² and
      the difference's interval ≈ 2 ± 1.96 × sqrt(.1996 / 1000) = [-0.77, 4.77]: not significant;
      McNemar chi² = (20 - 1)² / 200 = 1.805, p = 0.1791.
    - ckpt-clean wins 30 and loses 10: ≈ 2 ± 1.96 × sqrt(.0396 / 1000) = [0.77, 3.23]: significant;
      McNemar chi² = 19² / 40 = 9.025, p = 0.002663.
    Each run's pooled accuracy is a declared proportion, Wilson: 500/1000 = [46.91, 53.09], 520/1000 =
    [48.90, 55.08]; the overall (a macro average over the one task) equals it but is an aggregate, and
    gets the bootstrap: about ± 1.96 × sqrt(.25 / 1000) = ± 3.10.
    """
    data = _data(tmp_path / "data", ["t"] * 1000)
    base = list(range(500))
    no_ci = ("--resamples", "0")  # compare computes its own
    _score(run_cli, tmp_path / "base", data, base, 1000, *no_ci)
    _score(run_cli, tmp_path / "ckpt-noisy", data, [*range(90, 500), *range(500, 610)], 1000, *no_ci)
    _score(run_cli, tmp_path / "ckpt-clean", data, [*range(10, 500), *range(500, 530)], 1000, *no_ci)
    md, png, js = tmp_path / "cmp.md", tmp_path / "cmp.png", tmp_path / "cmp.json"
    result = run_cli("--plugin", "quiz_plugin", "eval", "compare", *(str(tmp_path / n) for n in
                     ("base", "ckpt-noisy", "ckpt-clean")), "--data-root", f"quiz={data}",
                     "--resamples", "1000", "--markdown", str(md), "--png", str(png),
                     "--json", str(js))  # fmt: skip
    result.assert_success()
    lines = result.output.splitlines()
    assert lines[0].split() == ["benchmark", "line", "base", "95%", "CI", "ckpt-noisy", "95%", "CI",
                                "ckpt-clean", "95%", "CI", "delta", "ckpt-noisy", "95%", "CI", "delta",
                                "ckpt-clean", "95%", "CI"]  # fmt: skip
    overall = next(line for line in lines if line.startswith("quiz") and "overall (accuracy)" in line)
    values = _numbers(overall)
    pooled = next(line for line in lines if line.startswith("quiz") and "pooled" in line)
    assert _numbers(pooled)[:9] == [50.0, 46.91, 53.09, 52.0, 48.90, 55.08, 52.0, 48.90, 55.08]
    assert values[0:9:3] == [50.0, 52.0, 52.0]
    for value, low, high in (values[0:3], values[3:6], values[6:9]):  # bootstrap, not Wilson
        assert low == pytest.approx(value - 3.10, abs=0.4) and high == pytest.approx(value + 3.10, abs=0.4)
        assert (low, high) not in ((46.91, 53.09), (48.90, 55.08))
    noisy, noisy_low, noisy_high, clean, clean_low, clean_high = values[9:]
    assert (noisy, clean) == (2.0, 2.0)
    assert noisy_low == pytest.approx(-0.77, abs=0.25) and noisy_high == pytest.approx(4.77, abs=0.25)
    assert clean_low == pytest.approx(0.77, abs=0.25) and clean_high == pytest.approx(3.23, abs=0.25)
    assert "+2.00 " in overall and "+2.00*" in overall  # only ckpt-clean's difference is marked
    assert overall.index("+2.00 ") < overall.index("+2.00*")
    out = result.output
    assert (
        "quiz, ckpt-noisy vs base: paired on 1000 rows; McNemar on row accuracy: 90 rows right in base only, "
        "110 in ckpt-noisy only, chi-square p=0.1791" in out
    )
    assert (
        "quiz, ckpt-clean vs base: paired on 1000 rows; McNemar on row accuracy: 10 rows right in base only, "
        "30 in ckpt-clean only, chi-square p=0.002663" in out
    )
    assert "  40 rows disagree: r0 (100 -> 0), r1 (100 -> 0)" in out and "... and 20 more" in out
    assert "quiz, base: 1000 rows, 1000 bootstrap resamples (seed 0)" in out

    text = md.read_text()
    assert "| quiz | pooled | 50.00% | [46.91, 53.09] |" in text
    assert "**+2.00\\***" in text and "\\*: the 95% interval of the difference excludes 0" in text
    # the disagreeing rows cut at 20 as in the terminal, pointing to the --json report that lists all
    noisy = next(line for line in text.splitlines() if "200 rows disagree" in line)
    assert noisy.startswith("  - 200 rows disagree: r0 (100 -> 0), r1 (100 -> 0)")
    assert noisy.count(" -> ") == 20 and noisy.endswith(", ... and 180 more (--json lists all)")
    assert "  - 40 rows disagree: " in text and "... and 20 more (--json lists all)" in text
    assert "r529 (0 -> 100)" not in text and "average" not in text  # one benchmark: no average row
    report = json.loads(js.read_text())["benchmarks"]["quiz"]
    assert report["runs"][0]["resamples"] == 1000
    assert report["paired"][1]["mcnemar"] == {"b": 10, "c": 30, "p": pytest.approx(0.002663, abs=1e-6),
                                             "method": "chi2"}  # fmt: skip
    assert len(report["paired"][0]["disagree"]) == 200 and report["paired"][0]["only_in_base"] == []
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_rows_scored_by_one_run_are_counted_and_named(
    quiz: Path, tmp_path: Path, run_cli: Callable[..., CliResult]
) -> None:
    """The base scored rows r0-r9; the other run a copy of the data without r8 and r9 but with r10
    (not in the base's data). They are paired on r0-r7; r8 and r9 are named, r10 too."""
    data = _data(tmp_path / "data", ["t"] * 10)
    other = tmp_path / "other-data"
    other.mkdir()
    questions = [{"id": f"r{i}", "answer": "A", "task": "t"} for i in (*range(8), 10)]
    (other / "questions.json").write_text(json.dumps(questions))
    _score(run_cli, tmp_path / "base", data, range(10), 10)
    _score(run_cli, tmp_path / "rl", other, [0, 1, 2, 3, 4, 5, 10], 11)
    result = run_cli("--plugin", "quiz_plugin", "eval", "compare", str(tmp_path / "base"),
                     str(tmp_path / "rl"),
                     "--data-root", f"quiz={data}", "--resamples", "200")  # fmt: skip
    result.assert_success()
    out = result.output
    assert (
        "quiz, rl vs base: paired on 8 rows; McNemar on row accuracy: 2 rows right in base only, 0 in rl "
        "only, exact binomial p=0.5" in out
    )
    assert "2 rows only in base, left out of the pairing: r8, r9" in out
    assert "quiz, rl: 1 scored rows are not in the benchmark's data and are left out" in out and "r10" in out
    # its own figure was 7/9 on its data; on the rows of this data it is 6/8, and the note says so
    assert "give 75.00%, its results.json 77.78%: the intervals are of the first" in out
    overall = next(line for line in out.splitlines() if line.startswith("quiz") and "overall" in line)
    # the delta is on the 8 shared rows: 6/8 - 8/8 = -25 points (the values shown are each run's own)
    assert _numbers(overall)[0] == 100.0 and "-25.00" in overall


def test_compare_without_what_intervals_need_says_why(
    quiz: Path, tmp_path: Path, run_cli: Callable[..., CliResult]
) -> None:
    data = _data(tmp_path / "data", ["t"] * 4)
    _score(run_cli, tmp_path / "a", data, [0, 1], 4)
    _score(run_cli, tmp_path / "b", data, [0, 1, 2], 4)
    result = run_cli("--plugin", "quiz_plugin", "eval", "compare", str(tmp_path / "a"), str(tmp_path / "b"))
    result.assert_success()
    assert result.output.splitlines()[0].split() == ["benchmark", "line", "a", "b", "delta"]
    assert "quiz: no intervals: results.json records no data root: give --data-root quiz=DIR" in result.output
    # a data root recorded in results.json (as videorl eval run writes it) is used
    for run in ("a", "b"):
        path = tmp_path / run / "results.json"
        results = json.loads(path.read_text())
        results["settings"]["benchmarks"] = {"quiz": {"data_root": str(data)}}
        path.write_text(json.dumps(results))
    result = run_cli("--plugin", "quiz_plugin", "eval", "compare", str(tmp_path / "a"), str(tmp_path / "b"))
    result.assert_success()
    assert (
        "quiz, b vs a: paired on 4 rows; McNemar on row accuracy: 0 rows right in a only, 1 in b only, exact "
        "binomial p=1" in result.output
    )
    unknown = run_cli("eval", "compare", str(tmp_path / "a"), str(tmp_path / "b"))  # no --plugin: no adapter
    unknown.assert_success()
    assert "quiz: no intervals: unknown benchmark 'quiz'" in unknown.output
    assert "(install its plugin, or load it with --plugin)" in unknown.output
    bad = run_cli("--plugin", "quiz_plugin", "eval", "compare", str(tmp_path / "a"), str(tmp_path / "b"),
                  "--data-root", "quiz")  # fmt: skip
    assert bad.exit_code == 2 and "--data-root 'quiz': expected NAME=DIR" in bad.stderr


def test_an_adapter_that_refuses_resamples_gets_no_intervals_and_a_reason(
    quiz: Path, tmp_path: Path, run_cli: Callable[..., CliResult]
) -> None:
    data = _data(tmp_path / "data", ["t"] * 4)
    for run, right in (("a", "AABB"), ("b", "AAAB")):
        (tmp_path / run / "strict").mkdir(parents=True)
        records = [json.dumps({"id": f"r{i}", "response": answer}) for i, answer in enumerate(right)]
        (tmp_path / run / "strict" / "predictions.jsonl").write_text("\n".join(records) + "\n")
        result = run_cli("--plugin", "quiz_plugin", "eval", "score", "--benchmark", "strict", "--data-root",
                         str(data), "--run", str(tmp_path / run))  # fmt: skip
        result.assert_success()
        assert (
            "warning: no intervals for strict: its aggregate failed on a bootstrap resample" in result.stderr
        )
        assert "(ValueError: a row appears twice)" in result.stderr
        assert "intervals" not in read_results(tmp_path / run)["benchmarks"]["strict"]
    result = run_cli("--plugin", "quiz_plugin", "eval", "compare", str(tmp_path / "a"), str(tmp_path / "b"),
                     "--data-root", f"strict={data}")  # fmt: skip
    result.assert_success()
    assert result.output.splitlines()[2].split()[-3:] == ["50.00%", "75.00%", "+25.00"]
    assert "strict: no intervals: its aggregate failed on a bootstrap resample" in result.output
