"""The curves of a training run as a PNG: reward and accuracy, overall and per problem_type, and its
in-training benchmark scores (``bench/<name>/overall``) when it has them. ``videorl plot`` and the demo
draw with it."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

FIGSIZE = (12.0, 4.5)  # inches
DPI = 100  # so the PNG is 1200 x 450 pixels
PANELS = ("reward", "accuracy")
BENCH_PANEL = "benchmarks"  # drawn only for a run with trainer.benchmarks

Curve = tuple[list[int], list[float]]


def curves(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Curve]]:
    """``{panel: {label: (steps, values)}}`` from metrics rows; ``overall`` first, then the problem
    types in alphabetical order, then validation curves (``val/<panel>/...``); the ``benchmarks``
    panel holds each benchmark's official overall (``bench/<name>/overall``) at the step it scored
    (``bench/<name>/step``, else the row's). Missing or null values are skipped."""
    found: dict[str, dict[str, Curve]] = {panel: {} for panel in (*PANELS, BENCH_PANEL)}
    for row in rows:
        for key, value in row.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if key.startswith("bench/") and key.endswith("/overall"):
                name = key[len("bench/") : -len("/overall")]
                steps, values = found[BENCH_PANEL].setdefault(name, ([], []))
                # the step whose weights it scored: on benchmark workers it arrives in a later row
                scored = row.get(f"bench/{name}/step")
                steps.append(int(scored) if isinstance(scored, (int, float)) else row["step"])
                values.append(float(value))
                continue
            validation = key.startswith("val/")
            panel, _, name = key.removeprefix("val/").partition("/")
            if panel not in found or not name:
                continue
            label = f"val {name}" if validation else name
            steps, values = found[panel].setdefault(label, ([], []))
            steps.append(row["step"])
            values.append(float(value))

    def order(label: str) -> tuple[bool, bool, str]:
        name = label.removeprefix("val ")
        return (label.startswith("val "), name != "overall", name)

    return {
        panel: {label: found[panel][label] for label in sorted(found[panel], key=order)} for panel in found
    }


def algorithm_name(algorithm: Mapping[str, Any]) -> str:
    """The algorithm of a run's ``algorithm`` config section, for a title: its preset (``"dapo"``), else
    its estimator and loss (``"grpo + ppo_clip"``); ``""`` when the section names neither."""
    preset = algorithm.get("preset")
    if isinstance(preset, str) and preset:
        return preset
    parts = [algorithm.get(k) for k in ("adv_estimator", "policy_loss")]
    return " + ".join(p for p in parts if isinstance(p, str) and p)


def render(data: dict[str, dict[str, Curve]], title: str) -> bytes:
    """The PNG of the curves (matplotlib is imported here, not when the command line starts).
    Validation and benchmark curves, a point every few steps, are drawn with markers."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=FIGSIZE, dpi=DPI)
    FigureCanvasAgg(figure)
    panels = [*PANELS, *([BENCH_PANEL] if data.get(BENCH_PANEL) else [])]
    axes = figure.subplots(1, len(panels))
    for ax, panel in zip(axes, panels, strict=True):
        for label, (steps, values) in data[panel].items():
            overall = label.removeprefix("val ") == "overall"
            sparse = label.startswith("val ") or panel == BENCH_PANEL
            ax.plot(
                steps,
                values,
                label=label,
                linewidth=2.4 if overall else 1.2,
                linestyle="--" if label.startswith("val ") else "-",
                marker="o" if sparse else None,
                markersize=4,
                color="black" if label == "overall" else None,
            )
        ax.set_title(panel)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if data[panel]:
            ax.legend(fontsize=8, loc="best")
    figure.suptitle(title)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()
