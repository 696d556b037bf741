"""Comparing evaluation runs, a base and any number of others: per benchmark and per category, each
run's value with its 95% interval, and each run's difference from the base with its paired interval.

Values are fractions in [0, 1] in ``results.json`` and shown as percentages (points) here. Intervals
need the rows' scores (``RUN/NAME/scores.jsonl``) and the benchmark's rows (its adapter and data root);
without them a line shows its values only and the notes say why (:mod:`videorl.eval.stats`).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from videorl.atomic import write_output_bytes
from videorl.benchmark import Benchmark, BenchmarkRow
from videorl.eval.aggregate import mean
from videorl.eval.scoring import aggregator
from videorl.eval.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    BenchmarkStats,
    Interval,
    PairedStats,
    ResampleError,
    benchmark_stats,
    paired_stats,
    percentile_interval,
    proportions,
    resample_group,
    summary_lines,
)

AVERAGE = "average"
SIGNIFICANT = "*"
_SHOW_ROWS = 20


@dataclass(frozen=True)
class ComparisonRow:
    """One line of a comparison: a benchmark's overall, one of its metrics, or one category value.

    ``values`` and ``intervals`` hold one entry per run (the base first); ``deltas`` and
    ``delta_intervals`` one per run after the base (that run minus the base).
    """

    benchmark: str
    label: str  # "overall (accuracy)", "R@0.5", "duration: short", ...
    values: tuple[float | None, ...]
    intervals: tuple[Interval | None, ...]
    deltas: tuple[float | None, ...]
    delta_intervals: tuple[Interval | None, ...]

    @property
    def is_overall(self) -> bool:
        return self.label.startswith("overall")

    def significant(self, run: int) -> bool:
        """Whether the interval of run ``run``'s difference (``run`` ≥ 1) excludes 0."""
        interval = self.delta_intervals[run - 1]
        return interval is not None and interval.excludes_zero


@dataclass
class BenchmarkComparison:
    """One benchmark's statistics: each run's (``None`` without its scores) and each later run against
    the base (``None`` where either run lacks scores), with notes on what is missing."""

    runs: list[BenchmarkStats | None]
    paired: list[PairedStats | None]
    unknown: list[list[str]] = field(default_factory=list)  # per run: scored ids not in the rows
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "runs": [None if s is None else s.as_dict() for s in self.runs],
            "paired": [None if p is None else p.as_dict() for p in self.paired],
            "not_in_data": self.unknown,
            "notes": self.notes,
        }


def benchmark_comparison(
    benchmark: Benchmark,
    rows: Sequence[BenchmarkRow],
    scores: Sequence[Mapping[str, float] | None],
    *,
    predictions: Sequence[Mapping[str, Any] | None] | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> BenchmarkComparison:
    """Intervals and paired tests for one benchmark from each run's per-row ``scores`` (by id; ``None``
    for a run without them). Rows are those of ``rows`` that a run scored; ids not in ``rows`` are noted.
    ``predictions``: each run's extracted predictions by id, for an adapter that aggregates them
    (:func:`videorl.eval.scoring.aggregator`)."""
    aggregates = [aggregator(benchmark, predictions[i] if predictions else None) for i in range(len(scores))]
    name = benchmark.name
    group, declared = resample_group(benchmark), proportions(benchmark)
    known = {r.id for r in rows}
    out = BenchmarkComparison([], [], [[i for i in s or {} if i not in known] for s in scores])
    for run_scores, aggregate in zip(scores, aggregates, strict=True):
        if run_scores is None:
            out.runs.append(None)
            continue
        mine = [r for r in rows if r.id in run_scores]
        try:
            out.runs.append(
                benchmark_stats(
                    name,
                    aggregate,
                    mine,
                    [float(run_scores[r.id]) for r in mine],
                    resamples=resamples,
                    seed=seed,
                    group=group,
                    declared=declared,
                )
                if mine
                else None
            )
        except ResampleError as exc:
            return BenchmarkComparison(
                [None] * len(scores), [None] * (len(scores) - 1), out.unknown, [f"no intervals: {exc}"]
            )
    base = scores[0]
    for run, run_scores in enumerate(scores[1:], start=1):
        if base is None or run_scores is None:
            out.paired.append(None)
            continue
        try:
            out.paired.append(
                paired_stats(
                    name,
                    aggregates[0],
                    rows,
                    base,
                    run_scores,
                    resamples=resamples,
                    seed=seed,
                    group=group,
                    known=(out.runs[0], out.runs[run]),
                    aggregate_b=aggregates[run],
                )
            )
        except ValueError as exc:
            out.paired.append(None)
            out.notes.append(f"no paired test: {exc}")
    return out


def _ids(ids: Sequence[str], limit: int = _SHOW_ROWS) -> str:
    """The first ``limit`` of ``ids``, and how many more there are (every output is cut alike; the
    ``--json`` report lists all)."""
    shown = list(ids[:limit])
    more = len(ids) - len(shown)
    return ", ".join(shown) + (f", ... and {more} more (--json lists all)" if more > 0 else "")


def _average_interval(reps: Sequence[np.ndarray]) -> Interval | None:
    return percentile_interval(np.mean(np.stack(reps), axis=0)) if reps else None


def compare_results(
    runs: Sequence[Mapping[str, Any]], stats: Mapping[str, BenchmarkComparison] | None = None
) -> list[ComparisonRow]:
    """Rows comparing the ``benchmarks`` of ``results.json`` objects (the base first).

    Benchmarks come in the order first seen; a line missing from a run has ``None`` there. A delta is
    the paired difference on the rows both runs scored where ``stats`` has it, else the difference of
    the two values. With more than one benchmark in every run, a last row averages their overall figures
    (with one, it would repeat that benchmark's overall under another interval).
    """
    if len(runs) < 2:
        raise ValueError("a comparison needs a base and at least one more run")
    stats = stats or {}
    benches = [r.get("benchmarks", {}) for r in runs]
    names = list(dict.fromkeys(n for b in benches for n in b))
    rows: list[ComparisonRow] = []
    for name in names:
        lines = [summary_lines(b[name]) if name in b else {} for b in benches]
        st = stats.get(name)
        labels = list(dict.fromkeys(label for run_lines in lines for label in run_lines))
        for label in labels:
            values = tuple(run_lines.get(label) for run_lines in lines)
            intervals = tuple(
                None if st is None or s is None else s.intervals.get(label)
                for s in (st.runs if st else [None] * len(runs))
            )
            deltas: list[float | None] = []
            delta_intervals: list[Interval | None] = []
            for run in range(1, len(runs)):
                paired = st.paired[run - 1] if st else None
                if paired is not None and label in paired.deltas:
                    deltas.append(paired.deltas[label])
                    delta_intervals.append(paired.intervals.get(label))
                else:
                    a, b = values[0], values[run]
                    deltas.append(None if a is None or b is None else b - a)
                    delta_intervals.append(None)
            rows.append(ComparisonRow(name, label, values, intervals, tuple(deltas), tuple(delta_intervals)))
    common = [n for n in names if all(n in b for b in benches)]
    if len(common) > 1:
        averages = tuple(mean(float(b[n]["overall"]) for n in common) for b in benches)
        per_run = [[stats[n].runs[i] if n in stats else None for n in common] for i in range(len(runs))]
        intervals = tuple(
            _average_interval([s.overall for s in ss if s is not None]) if all(ss) else None for ss in per_run
        )
        deltas, delta_intervals = [], []
        for run in range(1, len(runs)):
            pairs = [stats[n].paired[run - 1] if n in stats else None for n in common]
            if all(pairs):
                deltas.append(mean(p.deltas[next(iter(p.deltas))] for p in pairs if p is not None))
                delta_intervals.append(_average_interval([p.overall for p in pairs if p is not None]))
            else:
                deltas.append(averages[run] - averages[0])
                delta_intervals.append(None)
        label = f"overall ({len(common)} benchmarks in {'both' if len(runs) == 2 else 'all'} runs)"
        rows.append(ComparisonRow(AVERAGE, label, averages, intervals, tuple(deltas), tuple(delta_intervals)))
    return rows


def notes(
    names: Sequence[str], stats: Mapping[str, BenchmarkComparison], *, limit: int = _SHOW_ROWS
) -> list[str]:
    """What a reader needs besides the table: resampling, McNemar per pair, rows where two runs disagree,
    rows scored by one run only (``limit`` ids shown of each list)."""
    out: list[str] = []
    for bench, st in stats.items():
        out += [f"{bench}: {n}" for n in st.notes]
        for run, ids in enumerate(st.unknown):
            if ids:
                out.append(
                    f"{bench}, {names[run]}: {len(ids)} scored rows are not in the benchmark's data and "
                    f"are left out (was it scored on other data?): {_ids(ids, limit)}"
                )
        for run, s in enumerate(st.runs):
            if s is not None:
                out.append(
                    f"{bench}, {names[run]}: {s.n} rows, {s.resamples} bootstrap resamples (seed {s.seed})"
                )
        for run, p in enumerate(st.paired, start=1):
            if p is None:
                continue
            head = f"{bench}, {names[run]} vs {names[0]}: paired on {p.n} rows"
            if p.mcnemar is not None:
                m = p.mcnemar
                head += (
                    f"; McNemar on row accuracy: {m.b} rows right in {names[0]} only, {m.c} in {names[run]} "
                    f"only, {'exact binomial' if m.method == 'exact' else 'chi-square'} p={m.p:.4g}"
                )
            out.append(head)
            if p.disagree:
                shown = [f"{i} ({100 * a:g} -> {100 * b:g})" for i, a, b in p.disagree]
                out.append(f"  {len(p.disagree)} rows disagree: {_ids(shown, limit)}")
            for side, ids in ((names[0], p.only_a), (names[run], p.only_b)):
                if ids:
                    out.append(
                        f"  {len(ids)} rows only in {side}, left out of the pairing: {_ids(ids, limit)}"
                    )
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def _interval(value: Interval | None) -> str:
    return "-" if value is None else f"[{100 * value.low:.2f}, {100 * value.high:.2f}]"


def _header(names: Sequence[str], with_intervals: bool) -> list[str]:
    out = ["benchmark", "line"]
    for name in names:
        out += [name, "95% CI"] if with_intervals else [name]
    for name in names[1:]:
        delta = "delta" if len(names) == 2 else f"delta {name}"
        out += [delta, "95% CI"] if with_intervals else [delta]
    return out


def _cells(row: ComparisonRow, with_intervals: bool) -> list[str]:
    out = [row.benchmark, row.label]
    for value, interval in zip(row.values, row.intervals, strict=True):
        out += [_pct(value), _interval(interval)] if with_intervals else [_pct(value)]
    for run, (delta, interval) in enumerate(zip(row.deltas, row.delta_intervals, strict=True), start=1):
        text = "-" if delta is None else f"{100 * delta:+.2f}" + (SIGNIFICANT if row.significant(run) else "")
        out += [text, _interval(interval)] if with_intervals else [text]
    return out


def _has_intervals(rows: Sequence[ComparisonRow]) -> bool:
    return any(any(r.intervals) or any(r.delta_intervals) for r in rows)


def _legend(rows: Sequence[ComparisonRow]) -> str:
    text = "values in %, differences (delta) in points"
    if _has_intervals(rows):
        text += (
            f"; {SIGNIFICANT}: the 95% interval of the difference excludes 0 (paired bootstrap on the rows "
            "both runs scored)"
        )
    return text


def format_table(rows: Sequence[ComparisonRow], names: Sequence[str], notes: Sequence[str] = ()) -> str:
    """A plain-text table (percentages; deltas in points), the legend and ``notes``."""
    with_intervals = _has_intervals(rows)
    header = _header(names, with_intervals)
    cells = [_cells(r, with_intervals) for r in rows]
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]

    def fmt(row: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )

    lines = [fmt(header), "  ".join("-" * w for w in widths)] + [fmt(r) for r in cells]
    tail = [t for t in (_legend(rows), *notes) if t]
    return "\n".join(line.rstrip() for line in lines) + ("\n\n" + "\n".join(tail) if tail else "")


def to_markdown(rows: Sequence[ComparisonRow], names: Sequence[str], notes: Sequence[str] = ()) -> str:
    """A Markdown table (overall lines in bold), the legend and ``notes`` as a list."""
    with_intervals = _has_intervals(rows)
    header = _header(names, with_intervals)
    out = [
        "| " + " | ".join(h.replace("|", "\\|") for h in header) + " |",
        "|---|---|" + "---:|" * (len(header) - 2),
    ]
    for row in rows:
        cells = [c.replace("*", "\\*") for c in _cells(row, with_intervals)]
        if row.is_overall:
            cells = [f"**{c}**" if c != "-" else c for c in cells]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    legend = _legend(rows)
    if legend:
        out += ["", legend.replace("*", "\\*")]
    if notes:
        out += [""] + [f"- {n.strip()}" if not n.startswith("  ") else f"  - {n.strip()}" for n in notes]
    return "\n".join(out) + "\n"


def plot_comparison(rows: Sequence[ComparisonRow], path: Path, names: Sequence[str]) -> None:
    """:func:`comparison_figure` as a PNG at ``path``."""
    fig = comparison_figure(rows, names)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    write_output_bytes(Path(path), buf.getvalue())


def comparison_figure(rows: Sequence[ComparisonRow], names: Sequence[str]) -> Any:
    """A matplotlib figure with one panel per benchmark (and one for the average, which
    :func:`compare_results` gives only with several benchmarks): each of its lines (overall, metrics,
    categories) as bars per run, labelled with the value (and each later run's delta, ``*`` where its
    interval excludes 0), 95% intervals as error bars, the metric in the title.

    Needs matplotlib (``pip install videorl[plot]``); imported here only.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("writing a PNG needs matplotlib: pip install 'videorl[plot]'") from exc
    panels: dict[str, list[ComparisonRow]] = {}
    for row in rows:
        panels.setdefault(row.benchmark, []).append(row)
    widest = max(len(lines) for lines in panels.values())
    fig = Figure(figsize=(max(6.0, 1.0 + (0.3 + 0.35 * len(names)) * widest), 3.6 * len(panels)))
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, (bench, lines) in zip(axes, panels.items(), strict=True):
        _draw_panel(ax, bench, lines, names)
    axes[0].legend(fontsize=8, loc="upper right")
    if _has_intervals(rows):
        fig.suptitle(
            f"95% intervals; deltas vs {names[0]} in points, {SIGNIFICANT}: interval excludes 0", fontsize=9
        )
    fig.tight_layout()
    return fig


def _draw_panel(ax: Any, bench: str, lines: Sequence[ComparisonRow], names: Sequence[str]) -> None:
    """One benchmark's lines as grouped bars, each labelled with its value (and delta)."""
    width = 0.8 / len(names)
    xs = np.arange(len(lines))
    for run, name in enumerate(names):
        values = [r.values[run] for r in lines]
        heights = [100 * (v or 0.0) for v in values]
        errors = np.zeros((2, len(lines)))
        for i, (r, v) in enumerate(zip(lines, values, strict=True)):
            if v is not None and (iv := r.intervals[run]) is not None:
                errors[:, i] = [100 * max(0.0, v - iv.low), 100 * max(0.0, iv.high - v)]
        offset = (run - (len(names) - 1) / 2) * width
        # yerr as lists (matplotlib's check of a (2, n) array warns under numpy >= 1.25); none without
        # intervals, not caps of zero height
        yerr = errors.tolist() if errors.any() else None
        ax.bar(xs + offset, heights, width, label=name, yerr=yerr, capsize=2)
        for i, (r, v) in enumerate(zip(lines, values, strict=True)):
            text = "-" if v is None else f"{100 * v:.1f}"
            delta = r.deltas[run - 1] if run else None
            if delta is not None:
                text += f"\n{100 * delta:+.1f}{SIGNIFICANT if r.significant(run) else ''}"
            top = float(heights[i] + errors[1, i] + 1)  # above the error bar
            ax.annotate(text, (float(xs[i] + offset), top), ha="center", va="bottom", fontsize=6)
    metric = lines[0].label.removeprefix("overall").strip(" ()") if lines[0].is_overall else ""
    ax.set_title(f"{bench}: {metric} (%)" if metric else f"{bench} (%)", fontsize=10)
    ax.set_xticks(xs)
    ax.set_xticklabels([r.label for r in lines], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("score (%)")
    ax.set_ylim(0, 118)  # room for the labels above 100
