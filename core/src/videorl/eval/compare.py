"""Comparing two evaluation runs: per benchmark and per category, both values and the delta.

Values are fractions in [0, 1] in ``results.json`` and shown as percentages (points) here.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from videorl.atomic import atomic_write_bytes
from videorl.eval.aggregate import mean

AVERAGE = "average"


@dataclass(frozen=True)
class ComparisonRow:
    """One line of a comparison: a benchmark's overall, one of its metrics, or one category value."""

    benchmark: str
    label: str  # "overall (accuracy)", "R@0.5", "duration: short", ...
    a: float | None
    b: float | None

    @property
    def delta(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def is_overall(self) -> bool:
        return self.label.startswith("overall")


def _lines(summary: Mapping[str, Any]) -> dict[str, float]:
    metric = summary.get("metric") or "score"
    out = {f"overall ({metric})": float(summary["overall"])}
    for name, value in (summary.get("metrics") or {}).items():
        out[str(name)] = float(value)
    for kind, values in (summary.get("categories") or {}).items():
        for value, score in values.items():
            out[f"{kind}: {value}"] = float(score)
    return out


def compare_results(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[ComparisonRow]:
    """Rows comparing the ``benchmarks`` of two ``results.json`` objects.

    Benchmarks of run A come first in their order, then those only in run B; a line missing from one
    run has ``None`` there. The last row averages the overall figures of the benchmarks in both runs.
    """
    bench_a, bench_b = a.get("benchmarks", {}), b.get("benchmarks", {})
    names = list(bench_a) + [n for n in bench_b if n not in bench_a]
    rows: list[ComparisonRow] = []
    for name in names:
        lines_a = _lines(bench_a[name]) if name in bench_a else {}
        lines_b = _lines(bench_b[name]) if name in bench_b else {}
        labels = list(lines_a) + [k for k in lines_b if k not in lines_a]
        rows += [ComparisonRow(name, label, lines_a.get(label), lines_b.get(label)) for label in labels]
    both = [n for n in names if n in bench_a and n in bench_b]
    if both:
        rows.append(
            ComparisonRow(
                AVERAGE,
                f"overall ({len(both)} benchmarks in both runs)",
                mean(float(bench_a[n]["overall"]) for n in both),
                mean(float(bench_b[n]["overall"]) for n in both),
            )
        )
    return rows


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _delta(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.2f}"


def _cells(rows: Sequence[ComparisonRow]) -> list[list[str]]:
    return [[r.benchmark, r.label, _pct(r.a), _pct(r.b), _delta(r.delta)] for r in rows]


def format_table(rows: Sequence[ComparisonRow], name_a: str, name_b: str) -> str:
    """A plain-text table (percentages; delta = B - A in points)."""
    header = ["benchmark", "line", name_a, name_b, "delta"]
    cells = _cells(rows)
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]
    right = {2, 3, 4}

    def fmt(row: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))

    lines = [fmt(header), "  ".join("-" * w for w in widths)] + [fmt(r) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def to_markdown(rows: Sequence[ComparisonRow], name_a: str, name_b: str) -> str:
    """A Markdown table (overall lines in bold)."""
    out = [f"| benchmark | line | {name_a} | {name_b} | delta |", "|---|---|---:|---:|---:|"]
    for row, cells in zip(rows, _cells(rows), strict=True):
        if row.is_overall:
            cells = [f"**{c}**" if c != "-" else c for c in cells]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out) + "\n"


def plot_comparison(rows: Sequence[ComparisonRow], path: Path, name_a: str, name_b: str) -> None:
    """A bar chart of each benchmark's overall figure in both runs, with deltas, as a PNG.

    Needs matplotlib (``pip install videorl[plot]``); imported here only.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError("writing a PNG needs matplotlib: pip install 'videorl[plot]'") from exc
    overall = [r for r in rows if r.is_overall]
    labels = [r.benchmark for r in overall]
    width = 0.4
    fig = Figure(figsize=(max(6.0, 0.9 * len(overall) + 2), 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    xs = list(range(len(overall)))
    ax.bar([x - width / 2 for x in xs], [100 * (r.a or 0.0) for r in overall], width, label=name_a)
    ax.bar([x + width / 2 for x in xs], [100 * (r.b or 0.0) for r in overall], width, label=name_b)
    for x, r in zip(xs, overall, strict=True):
        if r.delta is not None:
            top = 100 * max(r.a or 0.0, r.b or 0.0)
            ax.annotate(_delta(r.delta), (x, top), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=30, ha="right")
    ax.set_ylabel("score (%)")
    ax.set_ylim(0, 105)
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    atomic_write_bytes(Path(path), buf.getvalue())
