"""``videorl eval``: rescore saved predictions and compare runs, without a model.

Run-directory layout: :mod:`videorl.eval.results`. Predictions files: :mod:`videorl.eval.predictions`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from videorl.errors import VideorlError
from videorl.plugins import Plugins

_SHOW_FAILED = 20


@click.group("eval")
def eval_group() -> None:
    """Evaluate on benchmarks: rescore saved predictions, compare runs."""


def _summary_text(name: str, summary: dict[str, Any]) -> str:
    lines = [
        f"{name}: {summary.get('metric', 'score')} {100 * summary['overall']:.2f} "
        f"(n={summary['n']}, failed={summary['n_failed']})"
    ]
    for metric, value in (summary.get("metrics") or {}).items():
        lines.append(f"  {metric}: {100 * value:.2f}")
    for kind, values in summary.get("categories", {}).items():
        lines.append(f"  {kind}:")
        lines += [f"    {value}: {100 * score:.2f}" for value, score in values.items()]
    failed = summary.get("failed", [])
    if failed:
        lines.append(f"failed ({len(failed)}, counted as wrong):")
        lines += [f"  {f['id']}: {f['reason']}" for f in failed[:_SHOW_FAILED]]
        if len(failed) > _SHOW_FAILED:
            lines.append(f"  ... and {len(failed) - _SHOW_FAILED} more (--json lists all)")
    return "\n".join(lines)


@eval_group.command("score")
@click.option("--benchmark", "name", required=True, help="Registered benchmark name (videorl plugins).")
@click.option(
    "--data-root",
    required=True,
    type=click.Path(path_type=Path),
    help="The benchmark's directory (its official files; docs/benchmarks.md).",
)
@click.option(
    "--predictions",
    type=click.Path(path_type=Path, dir_okay=False),
    help="JSONL with one {id, response | error} per line (default: RUN/NAME/predictions.jsonl).",
)
@click.option(
    "--run",
    "run_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="A run directory: read its predictions and write the new scores back into it.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--output", type=click.Path(path_type=Path, dir_okay=False), help="Also write the summary JSON here.")
@click.pass_obj
def score_command(
    plugins: Plugins,
    name: str,
    data_root: Path,
    predictions: Path | None,
    run_dir: Path | None,
    as_json: bool,
    output: Path | None,
) -> None:
    """Rescore saved predictions with a benchmark's official metric (no model needed).

    A row without a prediction, or whose prediction failed, counts as wrong and is listed.
    """
    from videorl.eval import predictions_path, read_predictions, record_result, score_predictions
    from videorl.eval.results import atomic_write

    try:
        canonical = plugins.benchmarks.canonical(name)
        benchmark = plugins.benchmarks.create(canonical)
        if predictions is None:
            if run_dir is None:
                raise click.UsageError("give --predictions P.jsonl or --run RUN")
            predictions = predictions_path(run_dir, canonical)
        rows = benchmark.load(data_root)
        result = score_predictions(benchmark, rows, read_predictions(predictions))
        if run_dir is not None:
            record_result(run_dir, result)
        text = json.dumps(result.summary, indent=2, ensure_ascii=False)
        if output is not None:
            atomic_write(output, text + "\n")
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from exc
    if result.unknown_ids:
        click.echo(
            f"warning: {len(result.unknown_ids)} predictions have ids that are not in {canonical} "
            f"(e.g. {result.unknown_ids[0]!r}); they were ignored",
            err=True,
        )
    click.echo(text if as_json else _summary_text(canonical, result.summary))


@eval_group.command("compare")
@click.argument("run_a", type=click.Path(path_type=Path, file_okay=False))
@click.argument("run_b", type=click.Path(path_type=Path, file_okay=False))
@click.option("--markdown", type=click.Path(path_type=Path, dir_okay=False), help="Write the table as Markdown.")
@click.option("--png", type=click.Path(path_type=Path, dir_okay=False), help="Write a bar chart (needs matplotlib).")
def compare_command(run_a: Path, run_b: Path, markdown: Path | None, png: Path | None) -> None:
    """Per-benchmark and per-category table of two runs and their deltas (B - A, in points)."""
    from videorl.eval import compare_results, format_table, plot_comparison, read_results, to_markdown
    from videorl.eval.results import atomic_write

    try:
        rows = compare_results(read_results(run_a), read_results(run_b))
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from exc
    name_a, name_b = run_a.name or str(run_a), run_b.name or str(run_b)
    if name_a == name_b:
        name_a, name_b = str(run_a), str(run_b)
    click.echo(format_table(rows, name_a, name_b))
    if markdown is not None:
        atomic_write(markdown, to_markdown(rows, name_a, name_b))
    if png is not None:
        try:
            plot_comparison(rows, png, name_a, name_b)
        except RuntimeError as exc:
            raise click.ClickException(str(exc)) from exc
