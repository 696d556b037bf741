"""``videorl plot RUN``: the reward and accuracy curves of a training run, overall and per problem_type,
and its in-training benchmark scores (``bench/<name>/overall``) when it has them."""

from __future__ import annotations

from pathlib import Path

import click
import yaml

from videorl.atomic import check_output, write_output_bytes
from videorl.errors import DataError, VideorlError
from videorl.runs.history import read_metrics
from videorl.runs.plot import algorithm_name, curves, render
from videorl.runs.records import CONFIG_FILE, METRICS_FILE

#: a run's config.yaml larger than this is not read for the title
MAX_CONFIG_BYTES = 1 << 20


@click.command("plot")
@click.argument("run", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="PNG to write [default: RUN/curves.png].",
)
def plot_command(run: Path, out: Path | None) -> None:
    """Draw the reward and accuracy curves of RUN (a run directory or its metrics.jsonl) to a PNG."""

    metrics = run / METRICS_FILE if run.is_dir() else run
    default = metrics.parent / "curves.png"
    target = out or default
    try:  # RUN/curves.png is plot's own; nothing else of the run it reads is replaced
        check_output(target, inputs=[metrics], reads=[metrics.parent], allowed=[default], what="--out")
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from None
    if not metrics.is_file():
        raise click.ClickException(f"{run} has no {METRICS_FILE}: is it the output_dir of a training run?")
    try:
        rows = read_metrics(metrics)
    except DataError as exc:
        raise click.ClickException(str(exc)) from exc
    data = curves(rows)
    if not any(data.values()):
        raise click.ClickException(f"{metrics} holds no reward/... or accuracy/... metrics to plot")
    try:
        png = render(data, title=_title(metrics.parent))
    except ImportError as exc:
        raise click.ClickException(f"plotting needs matplotlib: pip install 'videorl[plot]' ({exc})") from exc
    write_output_bytes(target, png)
    click.echo(f"wrote {target}")


def _title(run_dir: Path) -> str:
    """The run's name and its algorithm (from its ``config.yaml``; left out where that file is missing,
    too large or does not say)."""
    name = run_dir.resolve().name
    path = run_dir / CONFIG_FILE
    try:
        if not path.is_file() or path.stat().st_size > MAX_CONFIG_BYTES:
            return name
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return name
    algorithm = config.get("algorithm") if isinstance(config, dict) else None
    found = algorithm_name(algorithm) if isinstance(algorithm, dict) else ""
    return f"{name}: {found}" if found else name
