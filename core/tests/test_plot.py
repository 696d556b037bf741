"""``videorl plot``: curves from a hand-written metrics.jsonl, drawn to a PNG of the expected size."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from videorl.runs.plot import curves, render

ROWS = [
    {
        "step": 1,
        "reward/overall": 0.2,
        "reward/multiple_choice": 0.3,
        "accuracy/overall": 0.1,
        "actor/kl": 0.0,
    },
    {
        "step": 2,
        "reward/overall": 0.4,
        "reward/numerical": 0.5,
        "accuracy/overall": None,
        "accuracy/numerical": 1,
    },
    {"step": 3, "reward/overall": 0.6, "val/accuracy/overall": 0.7, "note": "text", "accuracy/overall": 0.5},
]


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_curves_by_hand() -> None:
    data = curves(ROWS)
    assert data["reward"] == {
        "overall": ([1, 2, 3], [0.2, 0.4, 0.6]),
        "multiple_choice": ([1], [0.3]),
        "numerical": ([2], [0.5]),
    }
    # null values are skipped; validation curves come last; other metrics are not plotted
    assert data["accuracy"] == {
        "overall": ([1, 3], [0.1, 0.5]),
        "numerical": ([2], [1.0]),
        "val overall": ([3], [0.7]),
    }
    assert list(data["accuracy"]) == ["overall", "numerical", "val overall"]


def _write_run(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_plot_writes_a_png(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    run = _write_run(tmp_path, ROWS)
    result = run_cli("plot", str(run)).assert_success()
    assert result.output.strip() == f"wrote {run / 'curves.png'}"
    assert _png_size(run / "curves.png") == (1200, 450)
    out = tmp_path / "figs" / "c.png"
    run_cli("plot", str(run / "metrics.jsonl"), "--out", str(out)).assert_success()
    assert _png_size(out) == (1200, 450)


def test_plot_errors_are_clear(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_cli("plot", str(empty))
    assert result.exit_code == 1 and "has no metrics.jsonl" in result.stderr
    run = _write_run(tmp_path, [{"step": 1, "actor/kl": 0.1}])
    result = run_cli("plot", str(run))
    assert result.exit_code == 1 and "no reward/... or accuracy/... metrics" in result.stderr
    (run / "metrics.jsonl").write_text('{"step": 1}\n{oops\n{"step": 2}\n')
    result = run_cli("plot", str(run))
    assert result.exit_code == 1 and "metrics.jsonl:2: not a JSON object" in result.stderr


def test_plot_never_writes_over_the_run_it_reads(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    run = _write_run(tmp_path, ROWS)
    before = (run / "metrics.jsonl").read_bytes()
    for out in (run / "metrics.jsonl", run / "checkpoints" / "x.png"):
        result = run_cli("plot", str(run), "--out", str(out))
        assert result.exit_code != 0 and "--out" in result.stderr, result.stderr
    assert "is the input file" in run_cli("plot", str(run), "--out", str(run / "metrics.jsonl")).stderr
    assert (run / "metrics.jsonl").read_bytes() == before and not (run / "checkpoints").exists()


def test_the_title_names_the_algorithm(
    tmp_path: Path, run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import videorl.commands.plot as command

    titles: list[str] = []
    monkeypatch.setattr(command, "render", lambda data, title: titles.append(title) or b"png")
    run = _write_run(tmp_path, ROWS)
    for config in (
        "algorithm:\n  preset: dapo\n  adv_estimator: grpo\n",  # a preset names the algorithm
        "algorithm:\n  preset: null\n  adv_estimator: rloo\n  policy_loss: ppo_clip\n",
        "algorithm: {oops\n",  # unreadable: the run's name alone
    ):
        (run / "config.yaml").write_text(config)
        run_cli("plot", str(run)).assert_success()
    (run / "config.yaml").unlink()
    run_cli("plot", str(run)).assert_success()
    assert titles == ["run: dapo", "run: rloo + ppo_clip", "run", "run"]


def test_validation_curves_are_drawn_with_markers(monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.axes import Axes

    drawn: dict[str, Any] = {}
    plot = Axes.plot

    def spy(self: Axes, *args: Any, **kwargs: Any) -> Any:
        drawn[kwargs["label"]] = kwargs.get("marker")
        return plot(self, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", spy)
    rows = [*ROWS, {"step": 3, "val/reward/overall": 0.6}]
    render(curves(rows), "t")
    assert drawn["val overall"] == "o" and drawn["overall"] is None  # val curves: a point per validation
