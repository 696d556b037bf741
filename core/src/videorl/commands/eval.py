"""``videorl eval``: run a model on benchmarks; rescore saved predictions and compare runs.

Run-directory layout: :mod:`videorl.eval.results`. Predictions files: :mod:`videorl.eval.predictions`.
The evaluator: :mod:`videorl.eval.pipeline`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from videorl.errors import VideorlError
from videorl.eval.stats import DEFAULT_RESAMPLES, DEFAULT_SEED
from videorl.plugins import Plugins

_SHOW_FAILED = 20


@click.group("eval")
def eval_group() -> None:
    """Evaluate on benchmarks: run a model, rescore saved predictions, compare runs."""


def _summary_text(name: str, summary: dict[str, Any]) -> str:
    intervals = (summary.get("intervals") or {}).get("lines", {})

    def ci(label: str) -> str:  # the 95% interval, where the summary has one (videorl eval score)
        iv = intervals.get(label)
        return f"  [{100 * iv['low']:.2f}, {100 * iv['high']:.2f}] {iv['method']}" if iv else ""

    metric = summary.get("metric") or "score"
    lines = [
        f"{name}: {metric} {100 * summary['overall']:.2f} "
        f"(n={summary['n']}, failed={summary['n_failed']}){ci(f'overall ({metric})')}"
    ]
    for metric, value in (summary.get("metrics") or {}).items():
        lines.append(f"  {metric}: {100 * value:.2f}{ci(metric)}")
    for kind, values in summary.get("categories", {}).items():
        lines.append(f"  {kind}:")
        lines += [f"    {value}: {100 * score:.2f}{ci(f'{kind}: {value}')}" for value, score in values.items()]
    if intervals:
        head = summary["intervals"]
        lines.append(f"  (95% intervals: {head['resamples']} bootstrap resamples of the rows, seed {head['seed']}; "
                     "wilson: the score interval of a proportion)")
    failed = summary.get("failed", [])
    if failed:
        lines.append(f"failed ({len(failed)}, counted as wrong):")
        lines += [f"  {f['id']}: {f['reason']}" for f in failed[:_SHOW_FAILED]]
        if len(failed) > _SHOW_FAILED:
            lines.append(f"  ... and {len(failed) - _SHOW_FAILED} more (--json lists all)")
    return "\n".join(lines)


_RESAMPLES = click.option(
    "--resamples", type=click.IntRange(min=0), default=DEFAULT_RESAMPLES, show_default=True,
    help="Bootstrap resamples of the rows for the 95% intervals (0: no intervals).",
)
_SEED = click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True, help="Seed of the resampling.")


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
    intervals of every figure (bootstrap over rows of the official aggregate; Wilson for accuracies).

    A row without a prediction, or whose prediction failed, counts as wrong and is listed.
    """
    from videorl.atomic import atomic_write_text
    from videorl.eval import predictions_path, read_predictions, record_result, score_predictions
    from videorl.eval.stats import ResampleError, benchmark_stats, resample_group

    try:
        canonical = plugins.benchmarks.canonical(name)
        benchmark = plugins.benchmarks.create(canonical)
        if predictions is None:
            if run_dir is None:
                raise click.UsageError("give --predictions P.jsonl or --run RUN")
            predictions = predictions_path(run_dir, canonical)
        rows = benchmark.load(data_root)
        result = score_predictions(benchmark, rows, read_predictions(predictions))
        if resamples and rows:
            try:
                scores = [r.score for r in result.rows]
                stats = benchmark_stats(canonical, benchmark.aggregate, rows, scores, resamples=resamples,
                                        seed=seed, group=resample_group(benchmark))
                result.summary["intervals"] = stats.as_dict()
            except ResampleError as exc:
                click.echo(f"warning: no intervals for {canonical}: {exc}", err=True)
        if run_dir is not None:
            record_result(run_dir, result)
        text = json.dumps(result.summary, indent=2, ensure_ascii=False)
        if output is not None:
            atomic_write_text(output, text + "\n")
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
@click.option("--data-root", "data_roots", multiple=True, metavar="NAME=DIR",
              help="A benchmark's directory, where results.json does not record it (repeatable).")
@click.option("--markdown", type=click.Path(path_type=Path, dir_okay=False), help="Write the table as Markdown.")
@click.option("--png", type=click.Path(path_type=Path, dir_okay=False), help="Write a bar chart (needs matplotlib).")
@click.option("--json", "json_out", type=click.Path(path_type=Path, dir_okay=False),
              help="Write every interval, test and disagreeing row as JSON.")
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
    from videorl.atomic import atomic_write_text
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
        results = [read_results(d) for d in dirs]
        stats = _comparison_stats(plugins, dirs, results, roots, resamples, seed) if resamples else {}
        rows = compare_results(results, stats)
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(format_table(rows, names, notes(names, stats)))
    if markdown is not None:
        atomic_write_text(markdown, to_markdown(rows, names, notes(names, stats, limit=None)))
    if json_out is not None:
        report = {"runs": [str(d) for d in dirs], "benchmarks": {k: v.as_dict() for k, v in stats.items()}}
        atomic_write_text(json_out, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    if png is not None:
        try:
            plot_comparison(rows, png, names)
        except RuntimeError as exc:
            raise click.ClickException(str(exc)) from exc


def _comparison_stats(
    plugins: Plugins, dirs: list[Path], results: list[dict[str, Any]], roots: dict[str, Path], resamples: int,
    seed: int,
) -> dict[str, Any]:
    """Each benchmark's intervals and paired tests; one that lacks what they need gets a note instead."""
    from videorl.eval.compare import BenchmarkComparison, benchmark_comparison
    from videorl.eval.results import read_scores

    out: dict[str, Any] = {}
    names = list(dict.fromkeys(n for r in results for n in r["benchmarks"]))
    for name in names:
        recorded = [r.get("settings", {}).get("benchmarks", {}).get(name, {}).get("data_root") for r in results]
        root = roots.get(name) or next((Path(p) for p in recorded if p), None)
        scores = [read_scores(d, name) if name in r["benchmarks"] else None for d, r in zip(dirs, results, strict=True)]
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
            out[name] = BenchmarkComparison([None] * len(dirs), [None] * (len(dirs) - 1), notes=[f"no intervals: {why}"])
            continue
        out[name] = found = benchmark_comparison(benchmark, rows, scores, resamples=resamples, seed=seed)
        for d, r, s, st in zip(dirs, results, scores, found.runs, strict=True):
            if s is None and name in r["benchmarks"]:
                found.notes.append(f"no intervals for {d}: it has no {name}/scores.jsonl")
            recorded_overall = float(r["benchmarks"][name]["overall"]) if name in r["benchmarks"] else None
            if st is not None and recorded_overall is not None:
                recomputed = next(iter(st.values.values()))
                if abs(recomputed - recorded_overall) > 1e-9:
                    found.notes.append(
                        f"{d}: its scores.jsonl on the rows in {root} give {100 * recomputed:.2f}, its results.json "
                        f"{100 * recorded_overall:.2f}: the intervals are of the first (rescore with eval score --run)"
                    )
    return out


def _benchmark_dirs(specs: tuple[str, ...], data_root: Path | None) -> list[tuple[str, Path]]:
    """``(name, directory)`` per ``--benchmark NAME[=DIR]``.

    ``DIR`` is taken relative to ``--data-root``; without it the benchmark's directory is
    ``DATA_ROOT/NAME`` when that exists, else ``DATA_ROOT`` itself (one benchmark only).
    """
    out = []
    for spec in specs:
        name, sep, directory = spec.partition("=")
        if sep:
            path = Path(directory).expanduser()
            out.append((name, path if path.is_absolute() or data_root is None else data_root / path))
            continue
        if data_root is None:
            raise click.UsageError(f"--benchmark {name}: give --data-root DIR or --benchmark {name}=DIR")
        if (data_root / name).is_dir() or len(specs) > 1:
            out.append((name, data_root / name))
        else:
            out.append((name, data_root))
    return out


def _engine_identity(kind: str, opts: dict[str, Any]) -> dict[str, Any]:
    """What identifies the engine in the results: name, dtype, and device for HF."""
    import torch

    if kind == "vllm":
        return {"name": "vllm", "dtype": opts["dtype"]}
    device = opts["device"] or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = opts["dtype"] if opts["dtype"] != "auto" else ("bfloat16" if device.startswith("cuda") else "float32")
    return {"name": "hf", "dtype": dtype, "device": device}


def _local_model(model: Path) -> Path:
    """``--model`` as a local path: a Hub id resolved from the cache (:mod:`videorl.hub`), else the path,
    which must exist."""
    from videorl.hub import resolve_model

    local = resolve_model(model)
    if not local.exists():
        raise click.BadParameter(f"{model}: no such folder", param_hint="--model")
    return local


def _model_dir(model: Path, run_dir: Path) -> Path:
    """``--model`` as a model directory. A training run (its latest undamaged checkpoint) or one of its
    checkpoints is exported first, as ``videorl export`` does, to ``RUN/model``; a later call with the
    same checkpoint reuses that export, and one with another checkpoint is refused for a run that
    already has results (its predictions came from the first)."""
    from videorl.commands.export import base_model_of, resolve_checkpoint
    from videorl.train.checkpoint import EXPORT_MARKER, STATE_FILE, export_hf_model
    from videorl.train.compose import CHECKPOINT_DIR
    from videorl.train.metrics import CONFIG_FILE

    if (model / "config.json").is_file() or not any(
        (model / name).exists() for name in (CHECKPOINT_DIR, CONFIG_FILE, STATE_FILE)
    ):
        return model  # a model directory, or something the backend lookup explains
    checkpoint = resolve_checkpoint(model).resolve()
    target = run_dir / "model"
    marker = target / EXPORT_MARKER
    exported = json.loads(marker.read_text(encoding="utf-8")).get("source") if marker.is_file() else None
    if exported == str(checkpoint):
        return target
    if exported is not None and (run_dir / "results.json").is_file():
        raise VideorlError(
            f"{run_dir} holds results of {exported}, not of {checkpoint}: evaluate it into another --out"
        )
    export_hf_model(checkpoint, base_model_of(checkpoint), target, overwrite=True)
    click.echo(f"--model {model}: exported {checkpoint} to {target} (videorl export {checkpoint} {target})")
    return target


def _engine(plugins: Plugins, kind: str, backend: Any, model: Path, opts: dict[str, Any]) -> Any:
    """The rollout engine: HF generate, or vLLM's AsyncLLM (registered as ``vllm-async``)."""
    import torch

    if kind == "hf":
        identity = _engine_identity(kind, opts)
        return plugins.rollout_engines.create(
            "hf", backend=backend, dtype=getattr(torch, identity["dtype"]), device=identity["device"],
            max_batch_prompts=opts["batch_size"],
        )
    return plugins.rollout_engines.create(
        "vllm-async",
        backend=backend,
        model_path=model,
        dtype=opts["dtype"],
        max_model_len=opts["max_model_len"],
        seed=opts["seed"],
        max_num_batched_tokens=opts["max_num_batched_tokens"],
    )


@eval_group.command("run")
@click.option("--model", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="A model directory (its config.json chooses the model backend), a Hub id (org/name) in the "
              "local Hugging Face cache, or a training run or one of its checkpoints (exported to OUT/model first).")
@click.option("--benchmark", "benchmarks", multiple=True, required=True, metavar="NAME[=DIR]",
              help="A registered benchmark (repeatable); =DIR gives its directory (relative to --data-root).")
@click.option("--data-root", type=click.Path(path_type=Path, file_okay=False),
              help="The benchmark's directory, or a folder holding one directory per benchmark NAME.")
@click.option("--out", "run_dir", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="The run directory (resumed when it exists: samples already predicted are skipped).")
@click.option("--engine", type=click.Choice(["hf", "vllm"]), default="hf", show_default=True,
              help="hf: transformers generate, batched; vllm: vLLM AsyncLLM with chunked prefill.")
@click.option("--cache-dir", type=click.Path(path_type=Path, file_okay=False),
              help="Frame cache, built on first use (default: RUN/frame-cache); share it between runs.")
@click.option("--fps", type=click.FloatRange(min=0, min_open=True), help="Frames per second sampled (default: the model family's).")
@click.option("--max-frames", type=click.IntRange(min=1), help="Most frames per video (default: the model family's).")
@click.option("--min-pixels", type=click.IntRange(min=1), help="Least pixels per frame.")
@click.option("--max-pixels", type=click.IntRange(min=1), help="Most pixels per frame (default: the model family's).")
@click.option("--total-pixels", type=click.IntRange(min=1), help="Most pixels of a whole video, per temporal patch.")
@click.option("--thinking", is_flag=True, help="Ask for reasoning before the answer (the thinking prompt variant).")
@click.option("--max-tokens", type=click.IntRange(min=1), default=1024, show_default=True, help="Most tokens per response.")
@click.option("--temperature", type=click.FloatRange(min=0), default=0.0, show_default=True, help="0: greedy.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N rows of each benchmark.")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True, help="Loader threads.")
@click.option("--batch-size", type=click.IntRange(min=1), default=8, show_default=True,
              help="Most prompts per HF generate call.")
@click.option("--batch-wait", type=click.FloatRange(min=0),
              help="Seconds the HF engine may wait for a fuller batch once a prompt is ready (default: 0.5).")
@click.option("--queue-size", type=click.IntRange(min=1), help="Most encoded prompts waiting or in flight (default: 2 × batch + workers).")
@click.option("--dtype", type=click.Choice(["auto", "float32", "bfloat16", "float16"]), default="auto", show_default=True,
              help="auto: HF bfloat16 on GPU, float32 on CPU; vLLM the checkpoint's.")
@click.option("--device", help="HF engine device (default: cuda when available, else cpu).")
@click.option("--max-model-len", type=click.IntRange(min=1), help="vLLM: context length (default: the model's).")
@click.option("--max-num-batched-tokens", type=click.IntRange(min=1), default=2048, show_default=True,
              help="vLLM: tokens per scheduler step (chunked prefill).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--logger", "loggers", multiple=True, metavar="NAME",
              help="Also log the summary to this registered logger (wandb, mlflow, tensorboard, a plugin's); repeatable.")
@click.option("--logger-option", "logger_options", multiple=True, metavar="NAME.KEY=VALUE",
              help="An option of a --logger (as trainer.logger_options), e.g. wandb.mode=offline; repeatable.")
@click.pass_obj
def run_command(
    plugins: Plugins,
    model: Path,
    benchmarks: tuple[str, ...],
    data_root: Path | None,
    run_dir: Path,
    engine: str,
    cache_dir: Path | None,
    thinking: bool,
    max_tokens: int,
    temperature: float,
    seed: int,
    limit: int | None,
    workers: int,
    batch_size: int,
    batch_wait: float | None,
    queue_size: int | None,
    quiet: bool,
    loggers: tuple[str, ...],
    logger_options: tuple[str, ...],
    **options: Any,
) -> None:
    """Evaluate a model on benchmarks: loader threads, the engine and scoring overlap.

    Predictions are appended to RUN/NAME/predictions.jsonl as samples complete; a killed run resumes
    where it stopped (same command). A sample that fails (missing video, engine error) counts as wrong
    and is listed. Results and every setting go to RUN/results.json (docs/benchmarks.md).
    """
    from videorl.backend import backend_for_model
    from videorl.eval.inputs import RowInputs, visual_params
    from videorl.eval.pipeline import Evaluator, load_task, timing_summary
    from videorl.eval.results import begin_run, run_settings
    from videorl.media import MediaCache
    from videorl.rollout import SamplingParams
    from videorl.train.loggers import open_eval_loggers, parse_logger_options, summary_figures

    decode = {k: options.pop(k) for k in ("fps", "max_frames", "min_pixels", "max_pixels", "total_pixels")}
    try:
        tasks = [load_task(plugins.benchmarks, name, root, limit=limit) for name, root in _benchmark_dirs(benchmarks, data_root)]
        names = [t.name for t in tasks]
        if len(set(names)) != len(names):
            raise click.UsageError(f"a benchmark is given twice: {', '.join(names)}")
        model = _model_dir(_local_model(model), run_dir)
        backend = backend_for_model(model, plugins.model_backends)
        video, image = visual_params(backend, **{k: v for k, v in decode.items() if v is not None})
        cache = MediaCache(cache_dir or run_dir / "frame-cache", strict_params=False, threads=1)  # one decoder thread per loader
        sampling = SamplingParams(n=1, temperature=temperature, max_tokens=max_tokens, seed=seed)
        inputs = RowInputs(backend, cache, video, image, thinking=thinking)
        settings = run_settings(
            inputs, sampling, model=model, engine=_engine_identity(engine, options), requirements=plugins.requirements(),
            tasks=tasks, limit=limit, pipeline={"workers": workers, "batch_size": batch_size, "queue_size": queue_size},
        )
        begin_run(run_dir, settings)  # refuses to resume a run made with other settings, before loading the model
        trackers = open_eval_loggers(plugins.loggers, loggers, parse_logger_options(logger_options), run_dir, settings,
                                     plugins.requirements()) if loggers else None  # fmt: skip
        rollout = _engine(plugins, engine, backend, model, {**options, "seed": seed, "batch_size": batch_size})
        try:
            wait = {} if batch_wait is None else {"batch_wait": batch_wait}
            evaluator = Evaluator(
                inputs, rollout, sampling, workers=workers, batch_size=batch_size, queue_size=queue_size, **wait
            )
            begin_run(run_dir, {**settings, "pipeline": evaluator.describe()})
            report = evaluator.run(tasks, run_dir, progress=not quiet)
            if trackers is not None:
                trackers.log_summary(summary_figures({n: r.summary for n, r in report.results.items()}))
        finally:
            rollout.close()
            if trackers is not None:
                trackers.close()
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from exc
    for name, result in report.results.items():
        click.echo(_summary_text(name, result.summary))
    click.echo(timing_summary(report))
    click.echo(f"results: {run_dir / 'results.json'}")
