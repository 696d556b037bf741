"""``videorl eval``: run a model on benchmarks; rescore saved predictions and compare runs.

Run-directory layout: :mod:`videorl.eval.results`. Predictions files: :mod:`videorl.eval.predictions`.
The evaluator: :mod:`videorl.eval.pipeline`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from videorl.atomic import check_output, write_output_text
from videorl.errors import VideorlError
from videorl.eval.stats import DEFAULT_RESAMPLES, DEFAULT_SEED
from videorl.plugins import Plugins
from videorl.runs.lock import FolderLock
from videorl.runs.trackers import parse_logger_options

_SHOW_FAILED = 20


@click.group("eval")
def eval_group() -> None:
    """Evaluate on benchmarks: run a model, rescore saved predictions, compare runs."""


def _summary_text(name: str, summary: dict[str, Any]) -> str:
    intervals = (summary.get("intervals") or {}).get("lines", {})

    def ci(label: str) -> str:  # the 95% interval, where the summary has one (videorl eval score)
        iv = intervals.get(label)
        return f"  [{100 * iv['low']:.2f}%, {100 * iv['high']:.2f}%] {iv['method']}" if iv else ""

    metric = summary.get("metric") or "score"
    lines = [
        f"{name}: {metric} {100 * summary['overall']:.2f}% "
        f"(n={summary['n']}, failed={summary['n_failed']}){ci(f'overall ({metric})')}"
    ]
    for metric, value in (summary.get("metrics") or {}).items():
        lines.append(f"  {metric}: {100 * value:.2f}%{ci(metric)}")
    readings = summary.get("readings")
    if readings:  # an adapter reporting the official reading and videorl's (Video-MME, VSI-Bench, ...)
        lines.append(
            f"  (the official figure counts {readings['counted']} rows; videorl reads "
            f"{readings['differ']} rows differently)"
        )
    for kind, values in summary.get("categories", {}).items():
        lines.append(f"  {kind}:")
        lines += [
            f"    {value}: {100 * score:.2f}%{ci(f'{kind}: {value}')}" for value, score in values.items()
        ]
    tools = summary.get("tools")
    if tools:  # answered through a workflow with tools (--workflow tool_agent)
        calls = ", ".join(f"{name} {n}" for name, n in tools["calls"].items()) or "none"
        lines.append(
            f"  tools: {tools['turns_per_sample']:.2f} turns per sample; calls: {calls}; "
            f"{tools['invalid_calls']} invalid; {tools['frames']} frames fetched"
        )
    if intervals:
        head = summary["intervals"]
        lines.append(
            f"  (95% intervals: {head['resamples']} bootstrap resamples of the rows, seed {head['seed']}; "
            "wilson: the score interval of a proportion)"
        )
    failed = summary.get("failed", [])
    if failed:
        lines.append(f"failed ({len(failed)}, counted as wrong):")
        lines += [f"  {f['id']}: {f['reason']}" for f in failed[:_SHOW_FAILED]]
        if len(failed) > _SHOW_FAILED:
            lines.append(f"  ... and {len(failed) - _SHOW_FAILED} more (--json lists all)")
    return "\n".join(lines)


_RESAMPLES = click.option(
    "--resamples",
    type=click.IntRange(min=0),
    default=DEFAULT_RESAMPLES,
    show_default=True,
    help="Bootstrap resamples of the rows for the 95% intervals (0: no intervals).",
)
_SEED = click.option(
    "--seed", type=int, default=DEFAULT_SEED, show_default=True, help="Seed of the resampling."
)


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
@click.option(
    "--output", type=click.Path(path_type=Path, dir_okay=False), help="Also write the summary JSON here."
)
@_RESAMPLES
@_SEED
@click.pass_obj
def score_command(
    plugins: Plugins,
    name: str,
    data_root: Path,
    predictions: Path | None,
    run_dir: Path | None,
    as_json: bool,
    output: Path | None,
    resamples: int,
    seed: int,
) -> None:
    """Rescore saved predictions with a benchmark's official metric (no model needed), with 95%
    intervals of every figure (Wilson for the proportions the adapter declares, else the bootstrap over
    rows of the official aggregate).

    A row without a prediction, or whose prediction failed, counts as wrong and is listed.
    """
    from videorl.eval import predictions_path, read_predictions, record_result, score_predictions
    from videorl.eval.scoring import aggregator
    from videorl.eval.stats import ResampleError, benchmark_stats, proportions, resample_group

    try:
        canonical = plugins.benchmarks.canonical(name)
        benchmark = plugins.benchmarks.create(canonical)
        if predictions is None:
            if run_dir is None:
                raise click.UsageError("give --predictions P.jsonl or --run RUN")
            predictions = predictions_path(run_dir, canonical)
        if output is not None:
            check_output(output, inputs=[predictions], reads=[run_dir], what="--output")
        rows = benchmark.load(data_root)
        result = score_predictions(benchmark, rows, read_predictions(predictions))
        if resamples and rows:
            try:
                scores = [r.score for r in result.rows]
                stats = benchmark_stats(
                    canonical,
                    aggregator(benchmark, {r.id: r.prediction for r in result.rows}),
                    rows,
                    scores,
                    resamples=resamples,
                    seed=seed,
                    group=resample_group(benchmark),
                    declared=proportions(benchmark),
                )
                result.summary["intervals"] = stats.as_dict()
            except ResampleError as exc:
                click.echo(f"warning: no intervals for {canonical}: {exc}", err=True)
        if run_dir is not None:
            record_result(run_dir, result)
        text = json.dumps(result.summary, indent=2, ensure_ascii=False)
        if output is not None:
            write_output_text(output, text + "\n")
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
@click.argument("base", type=click.Path(path_type=Path, file_okay=False))
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "--data-root",
    "data_roots",
    multiple=True,
    metavar="NAME=DIR",
    help="A benchmark's directory, where results.json does not record it (repeatable).",
)
@click.option(
    "--markdown", type=click.Path(path_type=Path, dir_okay=False), help="Write the table as Markdown."
)
@click.option(
    "--png", type=click.Path(path_type=Path, dir_okay=False), help="Write a bar chart (needs matplotlib)."
)
@click.option(
    "--json",
    "json_out",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write every interval, test and disagreeing row as JSON.",
)
@_RESAMPLES
@_SEED
@click.pass_obj
def compare_command(
    plugins: Plugins,
    base: Path,
    runs: tuple[Path, ...],
    data_roots: tuple[str, ...],
    markdown: Path | None,
    png: Path | None,
    json_out: Path | None,
    resamples: int,
    seed: int,
) -> None:
    """Per-benchmark and per-category table of a BASE run and RUNS: each value with its 95% interval,
    each run's difference from BASE (in points) with its paired interval (* when it excludes 0), McNemar's
    test for accuracies, the rows where two runs disagree and the rows one run scored alone.

    Intervals need each run's NAME/scores.jsonl and the benchmark's rows: its adapter and data root (from
    results.json, or --data-root NAME=DIR).
    """
    from videorl.eval import compare_results, format_table, plot_comparison, read_results, to_markdown
    from videorl.eval.compare import notes

    dirs = [base, *runs]
    names = [d.name or str(d) for d in dirs]
    if len(set(names)) != len(names):
        names = [str(d) for d in dirs]
    roots = {}
    for spec in data_roots:
        name, sep, directory = spec.partition("=")
        if not sep or not name or not directory:
            raise click.UsageError(f"--data-root {spec!r}: expected NAME=DIR")
        roots[name] = Path(directory).expanduser()
    try:
        for option, target in (("--markdown", markdown), ("--png", png), ("--json", json_out)):
            if target is not None:
                check_output(target, reads=dirs, what=option)
        results = [read_results(d) for d in dirs]
        stats = _comparison_stats(plugins, dirs, results, roots, resamples, seed) if resamples else {}
        rows = compare_results(results, stats)
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(format_table(rows, names, notes(names, stats)))
    if markdown is not None:
        write_output_text(markdown, to_markdown(rows, names, notes(names, stats)))  # --json lists all
    if json_out is not None:
        report = {"runs": [str(d) for d in dirs], "benchmarks": {k: v.as_dict() for k, v in stats.items()}}
        write_output_text(json_out, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    if png is not None:
        try:
            plot_comparison(rows, png, names)
        except RuntimeError as exc:
            raise click.ClickException(str(exc)) from exc


def _comparison_stats(
    plugins: Plugins,
    dirs: list[Path],
    results: list[dict[str, Any]],
    roots: dict[str, Path],
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    """Each benchmark's intervals and paired tests; one that lacks what they need gets a note instead."""
    from videorl.eval.compare import BenchmarkComparison, benchmark_comparison
    from videorl.eval.results import read_scored_rows

    out: dict[str, Any] = {}
    names = list(dict.fromkeys(n for r in results for n in r["benchmarks"]))
    for name in names:
        recorded = [
            r.get("settings", {}).get("benchmarks", {}).get(name, {}).get("data_root") for r in results
        ]
        root = roots.get(name) or next((Path(p) for p in recorded if p), None)
        scored = [
            read_scored_rows(d, name) if name in r["benchmarks"] else None
            for d, r in zip(dirs, results, strict=True)
        ]
        scores = [s[0] if s else None for s in scored]
        predictions = [s[1] if s else None for s in scored]
        why = None
        if all(s is None for s in scores):
            why = f"no run has {name}/scores.jsonl (rescore with videorl eval score --run)"
        elif root is None:
            why = f"results.json records no data root: give --data-root {name}=DIR"
        else:
            try:
                benchmark = plugins.benchmarks.create(plugins.benchmarks.canonical(name))
            except VideorlError as exc:
                why = f"{exc} (install its plugin, or load it with --plugin)"
            else:
                try:
                    rows = benchmark.load(root)
                except VideorlError as exc:
                    why = f"{exc} (give --data-root {name}=DIR)"
        if why is not None:
            out[name] = BenchmarkComparison(
                [None] * len(dirs), [None] * (len(dirs) - 1), notes=[f"no intervals: {why}"]
            )
            continue
        out[name] = found = benchmark_comparison(
            benchmark, rows, scores, predictions=predictions, resamples=resamples, seed=seed
        )
        for d, r, s, st in zip(dirs, results, scores, found.runs, strict=True):
            if s is None and name in r["benchmarks"]:
                found.notes.append(f"no intervals for {d}: it has no {name}/scores.jsonl")
            recorded_overall = float(r["benchmarks"][name]["overall"]) if name in r["benchmarks"] else None
            if st is not None and recorded_overall is not None:
                recomputed = next(iter(st.values.values()))
                if abs(recomputed - recorded_overall) > 1e-9:
                    found.notes.append(
                        f"{d}: its scores.jsonl on the rows in {root} give {100 * recomputed:.2f}%, its "
                        "results.json "
                        f"{100 * recorded_overall:.2f}%: the intervals are of the first (rescore with eval "
                        "score --run)"
                    )
    return out


def _key_help(key: str, text: str = "") -> str:
    """A flag's help: ``text`` (else the key's own help) and the config key it sets, with its default."""
    from videorl.config import config_keys
    from videorl.eval.config import EvalConfig

    found = next(k for k in config_keys(EvalConfig) if k.key == key)
    default = "" if found.default in (None, [], {}, "") else f", default {json.dumps(found.default)}"
    return f"{text or found.help} [{key}{default}]"


@eval_group.command("run")
@click.argument("args", nargs=-1, metavar="[CONFIG] [KEY=VALUE]...")
@click.option("--model", type=click.Path(path_type=Path, file_okay=False), help=_key_help("model.path"))
@click.option(
    "--benchmark",
    "benchmarks",
    multiple=True,
    metavar="NAME[=DIR]",
    help=_key_help(
        "benchmarks",
        "A registered benchmark (repeatable); =DIR gives its directory (relative to --data-root).",
    ),
)
@click.option("--data-root", type=click.Path(path_type=Path, file_okay=False), help=_key_help("data_root"))
@click.option(
    "--out", "run_dir", type=click.Path(path_type=Path, file_okay=False), help=_key_help("output_dir")
)
@click.option("--engine", metavar="NAME", help=_key_help("engine.name"))
@click.option("--workflow", metavar="NAME", help=_key_help("rollout.workflow"))
@click.option(
    "--tool",
    "tools",
    multiple=True,
    metavar="NAME",
    help=_key_help("rollout.tools", "A tool the workflow offers (repeatable), e.g. --tool get_frames."),
)
@click.option("--max-turns", type=click.IntRange(min=1), help=_key_help("rollout.max_turns"))
@click.option(
    "--cache-dir", type=click.Path(path_type=Path, file_okay=False), help=_key_help("data.cache_dir")
)
@click.option("--fps", type=click.FloatRange(min=0, min_open=True), help=_key_help("data.video_fps"))
@click.option("--max-frames", type=click.IntRange(min=1), help=_key_help("data.video_max_frames"))
@click.option("--min-pixels", type=click.IntRange(min=1), help=_key_help("data.video_min_pixels"))
@click.option("--max-pixels", type=click.IntRange(min=1), help=_key_help("data.video_max_pixels"))
@click.option("--total-pixels", type=click.IntRange(min=1), help=_key_help("data.video_total_pixels"))
@click.option("--thinking", is_flag=True, help=_key_help("data.thinking"))
@click.option("--max-tokens", type=click.IntRange(min=1), help=_key_help("sampling.max_tokens"))
@click.option("--temperature", type=click.FloatRange(min=0), help=_key_help("sampling.temperature"))
@click.option("--seed", type=int, help=_key_help("sampling.seed"))
@click.option("--limit", type=click.IntRange(min=1), help=_key_help("limit"))
@click.option("--workers", type=click.IntRange(min=1), help=_key_help("pipeline.workers"))
@click.option("--batch-size", type=click.IntRange(min=1), help=_key_help("pipeline.batch_size"))
@click.option("--batch-wait", type=click.FloatRange(min=0), help=_key_help("pipeline.batch_wait"))
@click.option("--queue-size", type=click.IntRange(min=1), help=_key_help("pipeline.queue_size"))
@click.option(
    "--dtype", type=click.Choice(["auto", "float32", "bfloat16", "float16"]), help=_key_help("engine.dtype")
)
@click.option("--device", help=_key_help("engine.device"))
@click.option("--max-model-len", type=click.IntRange(min=1), help=_key_help("engine.max_model_len"))
@click.option(
    "--max-num-batched-tokens", type=click.IntRange(min=1), help=_key_help("engine.max_num_batched_tokens")
)
@click.option("--quiet", is_flag=True, help=_key_help("quiet"))
@click.option(
    "--logger",
    "loggers",
    multiple=True,
    metavar="NAME",
    help=_key_help(
        "loggers",
        "Also log the summary "
        "to this registered logger (wandb, mlflow, tensorboard, a plugin's); repeatable.",
    ),
)
@click.option(
    "--logger-option",
    "logger_options",
    multiple=True,
    metavar="NAME.KEY=VALUE",
    help=_key_help("logger_options", "An option of a --logger, e.g. wandb.mode=offline; repeatable."),
)
@click.option("--print-config", is_flag=True, help="Print the resolved config and exit.")
@click.pass_obj
def run_command(plugins: Plugins, args: tuple[str, ...], print_config: bool, **flags: Any) -> None:
    """Evaluate a model on benchmarks as CONFIG (YAML, optional) and dotted KEY=VALUE overrides say; each
    flag is a shorthand for the key in brackets (flags win). Loader threads, the engine and scoring overlap.

    Predictions are appended to RUN/NAME/predictions.jsonl as samples complete; a killed run resumes
    where it stopped (same command). A sample that fails (missing video, engine error) counts as wrong
    and is listed. Results and every setting go to RUN/results.json (docs/benchmarks.md).

    \b
    Examples:
      videorl eval run --model MODEL --benchmark mvbench --data-root DATA --out RUN
      videorl eval run eval.yaml sampling.max_tokens=2048 --out RUN2
      videorl eval run ... --workflow tool_agent --tool get_frames --max-turns 3
    """
    from videorl.config import dump_config
    from videorl.eval.compose import build_evaluation
    from videorl.eval.config import load_eval_config
    from videorl.eval.pipeline import timing_summary

    config_file = args[0] if args and "=" not in args[0] else None
    if config_file is not None and not Path(config_file).is_file():
        raise click.UsageError(f"CONFIG {config_file!r} is not a file (overrides look like key=value)")
    try:
        config = load_eval_config(config_file, [*args[config_file is not None :], *_flag_overrides(flags)])
        if print_config:
            click.echo(dump_config(config), nl=False)
            return
        # one writer per --out folder, from the model it may export there to the last summary
        with FolderLock.acquire(config.output_dir, "the evaluation folder (--out)"):
            evaluation = build_evaluation(config, plugins, echo=click.echo)
            report = evaluation.run(plugins)
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from exc
    for name, result in report.results.items():
        click.echo(_summary_text(name, result.summary))
    click.echo(timing_summary(report))
    click.echo(f"results: {evaluation.run_dir / 'results.json'}")


def _flag_overrides(flags: dict[str, Any]) -> list[str]:
    """The flags given on the command line as ``key=value`` overrides (values as JSON, which is YAML)."""
    from click.core import ParameterSource

    from videorl.eval.config import FLAG_KEYS

    ctx = click.get_current_context()
    out = []
    for name, value in flags.items():
        if ctx.get_parameter_source(name) is not ParameterSource.COMMANDLINE:
            continue
        if name == "logger_options":
            value = parse_logger_options(value)
        elif isinstance(value, (tuple, list)):
            value = [str(v) for v in value]
        elif isinstance(value, Path):
            value = str(value)
        out.append(f"{FLAG_KEYS[name]}={json.dumps(value)}")
    return out
