"""Benchmarks during training (``trainer.benchmarks``): passes scored through the run's own rollout engine.

Every ``every`` steps, and after the last step, each configured benchmark's rows are answered by the
engine the run already holds, with the current weights (no second model), and scored exactly as
``videorl eval run`` scores them: the same prompts (the adapter's, for the run's model family), the
same frames (the run's visual budget, :meth:`~videorl.config.DataConfig.visual_budget`, through the
frame cache), the same records and the same rescoring from the predictions file
(:func:`videorl.eval.pipeline.prediction_record`, :func:`~videorl.eval.pipeline.score_tasks`). In one
process the rows go through :class:`~videorl.eval.pipeline.Evaluator` itself; on Ray the rollout
workers encode and generate them (:class:`WorkerBenchmarks`) and only row ids and token ids cross.

::

    RUN/benchmarks/
      frame-cache/                  the benchmarks' frames (when data.cache_dir is null)
      step_000010/NAME/             an evaluation run directory (videorl.eval.results):
        results.json                  settings (the training run, step and resume point) and the summary
        NAME/predictions.jsonl        one record per row, appended as rows complete
        NAME/scores.jsonl

so ``videorl eval compare RUN/benchmarks/step_000010/NAME RUN/benchmarks/step_000020/NAME`` compares two
steps, or a step with a separate ``videorl eval run``. The summary becomes the metrics
``bench/NAME/overall``, ``bench/NAME/<metric>`` (the adapter's further official figures),
``bench/NAME/<category kind>/<value>`` and ``bench/NAME/failed`` (rows that scored 0 for a failure),
``bench/NAME/tool/*`` for an entry answered through a ``workflow`` (turns per row, calls per tool,
invalid calls, frames fetched), with ``time/benchmarks``, the pass's wall time (the loop's timing of
:class:`BenchmarkEvaluation`).

Resume: a pass whose ``results.json`` already holds a benchmark's summary (for the same rows) is not run
again, its metrics are read back (a resumed run logs the steps it repeats anew); a pass interrupted
mid-way resumes by row id, as ``videorl eval run`` does: rows already answered are not asked again. Both
only for the same weights (:meth:`BenchmarkPasses.policy`): a run resumed from another checkpoint than the
pass's weights continued from evaluates it anew, the earlier pass moved to ``NAME.earlier-N``.

Failures: a benchmark that cannot be loaded, whose pass raises, or with rows that fail (a missing video,
an adapter error on one row) is logged naming the benchmark and the rows, and training goes on; with
``trainer.benchmarks_strict`` it raises instead (a benchmark that cannot be loaded, before the first step).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.errors import ConfigError, VideorlError
from videorl.rollout import SamplingParams
from videorl.rollout.placement import GroupedEngine

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.config import TrainConfig
    from videorl.config.run import BenchmarkConfig
    from videorl.eval.agent import AgentRollout
    from videorl.eval.inputs import RowInputs
    from videorl.eval.pipeline import EvalTask
    from videorl.eval.scoring import BenchmarkResult
    from videorl.media import MediaCache
    from videorl.plugins import Plugins
    from videorl.registry import Registry
    from videorl.train.loop import PeriodicEvaluation

__all__ = [
    "PASSES_DIR",
    "BenchmarkEvaluation",
    "BenchmarkPasses",
    "RowRunner",
    "evaluator_runner",
    "local_evaluations",
    "pass_dir",
    "summary_metrics",
]

PASSES_DIR = "benchmarks"
#: rows per rollout worker and call on Ray: a kill loses at most this many answers per worker
CHUNK_ROWS = 16
_SHOW_FAILED = 5  # failed rows named in a log line

log = logging.getLogger("videorl.train.benchmarks")

RowRunner = Callable[
    ["EvalTask", "RowInputs", Path, "SamplingParams", "AgentRollout | None"], "BenchmarkResult"
]
"""``runner(task, inputs, run_dir, sampling, agent)``: answer the rows of ``task`` not yet predicted in
``run_dir`` (``inputs`` builds their prompts; ``agent``: through that workflow, the entry's
``workflow``), then score the benchmark into ``run_dir``."""


def pass_dir(output_dir: Path | str, step: int, name: str) -> Path:
    """``RUN/benchmarks/step_NNNNNN/NAME``: the evaluation run directory of one benchmark's pass."""
    return Path(output_dir) / PASSES_DIR / f"step_{step:06d}" / name


def summary_metrics(name: str, summary: Mapping[str, Any], step: int) -> dict[str, float]:
    """A benchmark summary (``results.json``) of the pass at ``step`` as ``bench/NAME/...`` metrics,
    with ``bench/NAME/step``: the step whose weights it scored (on Ray with benchmark workers, a pass's
    metrics arrive in the row of a later step)."""
    prefix = f"bench/{name}"
    out = {f"{prefix}/overall": float(summary["overall"]), f"{prefix}/step": float(step)}
    for metric, value in (summary.get("metrics") or {}).items():
        out[f"{prefix}/{metric}"] = float(value)
    for kind, values in (summary.get("categories") or {}).items():
        for value, score in values.items():
            out[f"{prefix}/{kind}/{str(value).replace('/', '_')}"] = float(score)
    out[f"{prefix}/failed"] = float(summary.get("n_failed", 0))
    tools = summary.get("tools")
    if tools:  # rows answered through a workflow: turns per row, calls per tool, invalid calls
        out[f"{prefix}/tool/turns_per_sample"] = float(tools["turns_per_sample"])
        out[f"{prefix}/tool/invalid_calls"] = float(tools["invalid_calls"])
        out[f"{prefix}/tool/frames"] = float(tools["frames"])
        for tool, count in tools["calls"].items():
            out[f"{prefix}/tool/calls/{tool}"] = float(count)
    return out


def _select(task: EvalTask, spec: BenchmarkConfig) -> EvalTask:
    """``task`` with only the rows ``spec`` asks for: its ``ids`` (in the benchmark's order), then
    ``limit``."""
    from dataclasses import replace

    rows = task.rows
    if spec.ids:
        known = {r.id for r in rows}
        unknown = [i for i in spec.ids if i not in known]
        if unknown:
            raise ConfigError(
                f"trainer.benchmarks: {spec.name}: ids not in {task.data_root}: {', '.join(unknown[:10])}"
            )
        wanted = set(spec.ids)
        rows = [r for r in rows if r.id in wanted]
    return replace(task, rows=rows[: spec.limit] if spec.limit is not None else rows)


def load_benchmark(benchmarks: Registry[Any], spec: BenchmarkConfig) -> EvalTask:
    """The rows ``spec`` selects from its benchmark's files (the adapter's errors name the file)."""
    from videorl.eval.pipeline import load_task

    return _select(load_task(benchmarks, spec.name, Path(spec.data_root).expanduser().absolute()), spec)


def sampling_of(spec: BenchmarkConfig) -> SamplingParams:
    """One response per row, as ``videorl eval run`` samples (its seed 0)."""

    return SamplingParams(n=1, temperature=spec.temperature, max_tokens=spec.max_tokens, seed=0)


def benchmark_cache(config: TrainConfig) -> MediaCache:
    """The frame cache of the benchmarks' videos: ``data.cache_dir``, else ``RUN/benchmarks/frame-cache``;
    built on first use whatever ``data.source_mode`` (benchmark videos are not preprocessed with the
    training data)."""
    from videorl.media import MediaCache

    root = config.data.cache_dir or Path(config.output_dir) / PASSES_DIR / "frame-cache"
    return MediaCache(root, strict_params=False, threads=1)  # one decoder thread per loader, as eval


def benchmark_agent(config: TrainConfig, plugins: Plugins, spec: BenchmarkConfig) -> AgentRollout:
    """The workflow a ``trainer.benchmarks`` entry answers its rows with (its ``workflow``), made as the
    run's own is, with the run's ``rollout.tools`` and budgets and the entry's sampling."""
    from videorl.eval.agent import make_agent

    assert spec.workflow is not None
    key = f"trainer.benchmarks: {spec.name}: workflow"
    return make_agent(plugins, spec.workflow, config, sampling_of(spec), key=key)


def row_inputs(config: TrainConfig, backend: ModelBackend, cache: MediaCache, thinking: bool) -> RowInputs:
    """The evaluator's inputs at the run's visual budget (what ``videorl eval run`` builds from the same
    ``data.*`` keys)."""
    from videorl.eval.inputs import RowInputs, visual_params

    video, image = visual_params(backend, config.data.visual_budget(backend.budget))
    return RowInputs(backend, cache, video, image, thinking=thinking)


@dataclass
class _Benchmark:
    """A configured benchmark: its rows once loaded, or why they could not be."""

    spec: BenchmarkConfig
    task: EvalTask | None = None
    error: str | None = None


class BenchmarkPasses:
    """The benchmark passes of one training run (``trainer.benchmarks``): which are due, running them."""

    def __init__(
        self, config: TrainConfig, plugins: Plugins, backend: ModelBackend, *, resumed_from: int = 0
    ) -> None:
        """Load every benchmark's rows now: with ``trainer.benchmarks_strict`` one that cannot be loaded
        raises before training starts; otherwise it is logged and tried again at each pass.
        ``resumed_from``: the step of the checkpoint the run resumed from (0: none), part of what the
        passes record of the weights they score (:meth:`policy`)."""
        self.config, self.backend = config, backend
        self.resumed_from = resumed_from
        self.registry = plugins.benchmarks
        self.requirements = plugins.requirements()
        self.strict = config.trainer.benchmarks_strict
        self.cache = benchmark_cache(config)
        self._inputs: dict[bool, RowInputs] = {}
        self.benchmarks = [_Benchmark(spec) for spec in config.trainer.benchmarks]
        self.agents = {
            spec.name: benchmark_agent(config, plugins, spec)
            for spec in config.trainer.benchmarks
            if spec.workflow is not None
        }  # an unknown workflow or tool stops the run before training starts
        for bench in self.benchmarks:
            self._load(bench)

    def __bool__(self) -> bool:
        return bool(self.benchmarks)

    def _load(self, bench: _Benchmark) -> None:
        try:
            bench.task, bench.error = load_benchmark(self.registry, bench.spec), None
        except Exception as exc:
            reason = failure_reason(exc)
            if self.strict:
                raise ConfigError(f"trainer.benchmarks: {bench.spec.name}: {reason}") from exc
            bench.error = reason
            log.error("benchmark %s cannot be loaded, its passes are skipped: %s", bench.spec.name, reason)

    def inputs(self, spec: BenchmarkConfig) -> RowInputs:
        thinking = self.config.data.thinking if spec.thinking is None else spec.thinking
        if thinking not in self._inputs:
            self._inputs[thinking] = row_inputs(self.config, self.backend, self.cache, thinking)
        return self._inputs[thinking]

    def due(self, step: int, last_step: int) -> list[str]:
        """The benchmarks with a pass at ``step``: every ``every`` steps, and after ``last_step``."""
        from videorl.train.loop import periodic_due

        return [
            b.spec.name for b in self.benchmarks if periodic_due(step, b.spec.every, last_step, at_last=True)
        ]

    def run(self, step: int, runner: RowRunner) -> dict[str, float]:
        """The passes due at ``step``: their ``bench/*`` metrics. ``runner`` answers and scores one
        benchmark (:func:`evaluator_runner`, :func:`rows_runner`)."""
        metrics: dict[str, float] = {}
        for each in self.run_each(step, runner).values():
            metrics.update(each)
        return metrics

    def run_each(
        self,
        step: int,
        runner: RowRunner,
        names: Sequence[str] | None = None,
        *,
        training: Mapping[str, Any] | None = None,
    ) -> dict[str, dict[str, float]]:
        """The passes of ``names`` (default: those due) at ``step``: each benchmark's ``bench/*``
        metrics, by name (none for one that was skipped or failed). ``training``: the record
        (:meth:`policy`) of the weights being scored when they are not this run's at ``step`` (weights
        an earlier run kept for its passes, :mod:`videorl.cluster.benchmark_group`): the passes it
        began are then finished whatever checkpoint this run resumed from."""
        wanted = set(self.due(step, self.config.trainer.max_steps) if names is None else names)
        out: dict[str, dict[str, float]] = {}
        for bench in self.benchmarks:
            if bench.spec.name in wanted:
                metrics = self._pass(step, bench, runner, training)
                if metrics:
                    out[bench.spec.name] = metrics
        return out

    def directory(self, step: int, name: str) -> Path | None:
        """The evaluation run directory of benchmark ``name``'s pass at ``step`` (None: its rows could
        not be loaded)."""
        bench = next(b for b in self.benchmarks if b.spec.name == name)
        return None if bench.task is None else pass_dir(self.config.output_dir, step, bench.task.name)

    def recorded(self, step: int, name: str) -> Mapping[str, Any] | None:
        """The summary an earlier run recorded for benchmark ``name``'s pass at ``step`` (all its rows,
        this run's sampling), if any."""
        bench = next(b for b in self.benchmarks if b.spec.name == name)
        if bench.task is None:
            return None
        return self._finished(pass_dir(self.config.output_dir, step, bench.task.name), bench.task, bench.spec)

    def evaluation(self, runner: RowRunner) -> BenchmarkEvaluation:
        """These passes as the loop's periodic evaluation (:class:`videorl.train.loop.PeriodicEvaluation`)."""
        return BenchmarkEvaluation(self, runner)

    def _pass(
        self, step: int, bench: _Benchmark, runner: RowRunner, training: Mapping[str, Any] | None
    ) -> dict[str, float]:
        name = bench.spec.name
        if bench.task is None:
            self._load(bench)  # a data root mounted meanwhile, a file fixed
        if bench.task is None:
            log.error("step %d: benchmark %s skipped: %s", step, name, bench.error)
            return {}
        run_dir = pass_dir(self.config.output_dir, step, bench.task.name)
        if training is None:
            self._set_aside_other_weights(step, run_dir)
        done = self._finished(run_dir, bench.task, bench.spec)
        if done is not None:
            return summary_metrics(name, done, step)
        try:
            summary = self._evaluate(step, bench.task, bench.spec, run_dir, runner, training)
        except Exception as exc:
            if self.strict:
                raise VideorlError(
                    f"step {step}: benchmark {name} failed (trainer.benchmarks_strict): {failure_reason(exc)}"
                ) from exc
            log.exception("step %d: benchmark %s failed, training goes on", step, name)
            return {}
        failed = summary.get("failed") or []
        if failed:
            rows = "; ".join(f"{f['id']}: {f['reason']}" for f in failed[:_SHOW_FAILED])
            more = f" (and {len(failed) - _SHOW_FAILED} more)" if len(failed) > _SHOW_FAILED else ""
            message = (
                f"step {step}: benchmark {name}: {len(failed)} of {summary['n']} rows failed and score 0: "
                f"{rows}{more} (all in {run_dir})"
            )
            if self.strict:
                raise VideorlError(f"{message}; trainer.benchmarks_strict stops the run")
            log.error(message)
        return summary_metrics(name, summary, step)

    def policy(self, step: int) -> dict[str, Any]:
        """The weights a pass at ``step`` scores, as its ``results.json`` records them (``"training"``):
        the run, the step, the checkpoint the run resumed from (0: none) and the last checkpoint it
        resumed from or wrote before ``step``, which those weights continue from. (No checkpoint of
        ``step`` itself: the pass runs before the step's save, which ``trainer.save_every`` may skip.)"""
        from videorl.train.loop import periodic_due

        t = self.config.trainer
        saves = [
            s
            for s in range(self.resumed_from + 1, step)
            if periodic_due(s, t.save_every, t.max_steps, at_last=True)
        ]
        return {
            "output_dir": str(Path(self.config.output_dir).absolute()),
            "step": step,
            "resumed_from": self.resumed_from,
            "continues_from": max([self.resumed_from, *saves]),
        }

    def _set_aside_other_weights(self, step: int, run_dir: Path) -> None:
        """Move away a pass ``run_dir`` that an earlier run recorded for other weights, so that it is
        evaluated anew rather than read back or resumed by row id. The same weights: a run resumed from
        the same checkpoint, or from the one the recorded weights continued from (a resumed run repeats
        the steps since exactly: the same data order and seeds)."""
        from videorl.eval.results import RESULTS_FILE, read_results

        if not (run_dir / RESULTS_FILE).is_file():
            return
        recorded = read_results(run_dir)["settings"].get("training") or {}
        resumed_from = self.resumed_from
        if resumed_from in (recorded.get("resumed_from"), recorded.get("continues_from")):
            return
        n = 1
        while (aside := run_dir.with_name(f"{run_dir.name}.earlier-{n}")).exists():
            n += 1
        run_dir.rename(aside)
        log.warning(
            "step %d: %s was evaluated by a run resumed from step %s whose weights continued from step %s; "
            "this run resumed from step %d, so its weights may differ: the pass is evaluated again (the "
            "earlier one moved to %s)",
            step, run_dir, recorded.get("resumed_from"), recorded.get("continues_from"), resumed_from, aside,
        )  # fmt: skip

    def _finished(self, run_dir: Path, task: EvalTask, spec: BenchmarkConfig) -> Mapping[str, Any] | None:
        """The summary an earlier run recorded for this pass (all of ``task``'s rows, ``spec``'s sampling
        and workflow), if any; with other settings the pass is evaluated, and ``begin_run`` names what
        differs."""
        from dataclasses import asdict

        from videorl.eval.results import RESULTS_FILE, read_results

        if not (run_dir / RESULTS_FILE).is_file():
            return None
        results = read_results(run_dir)
        summary = results["benchmarks"].get(task.name)
        agent, settings = self.agents.get(spec.name), results["settings"]
        workflow = agent.settings() if agent is not None else None
        same = settings.get("sampling") == asdict(sampling_of(spec)) and settings.get("workflow") == workflow
        if summary is None or summary.get("n") != len(task.rows) or not same:
            return None
        result: Mapping[str, Any] = summary
        return result

    def _evaluate(
        self,
        step: int,
        task: EvalTask,
        spec: BenchmarkConfig,
        run_dir: Path,
        runner: RowRunner,
        training: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        from videorl.eval.results import begin_run, run_settings

        inputs, sampling = self.inputs(spec), sampling_of(spec)
        c = self.config
        settings = run_settings(
            inputs, sampling, model=c.output_dir,  # the weights of a step of this run: "training" says which
            engine={"name": c.rollout.engine, "dtype": c.model.dtype,
                    "options": dict(c.rollout.engine_options)},
            requirements=self.requirements, tasks=[task], limit=spec.limit,
        )  # fmt: skip
        agent = self.agents.get(spec.name)
        if agent is not None:
            settings["workflow"] = agent.settings()
        settings["training"] = dict(training) if training is not None else self.policy(step)
        begin_run(run_dir, settings)  # a pass resumed with other settings is refused, naming them
        return runner(task, inputs, run_dir, sampling, agent).summary


@dataclass
class BenchmarkEvaluation:
    """The loop's periodic evaluation of ``trainer.benchmarks``; the loop times it as ``time/benchmarks``."""

    passes: BenchmarkPasses
    runner: RowRunner
    name: str = PASSES_DIR

    def due(self, step: int, last_step: int) -> bool:
        return bool(self.passes.due(step, last_step))

    def __call__(self, step: int) -> dict[str, float]:
        return self.passes.run(step, self.runner)


def local_evaluations(passes: BenchmarkPasses, engine: Any, rank: int) -> list[PeriodicEvaluation]:
    """The evaluations of one process or torchrun rank: the passes on rank 0, with its engine (the
    leader's own engine of a tensor-parallel group, which needs no other rank); none on the other ranks,
    which go on to the step's metrics and wait there (the metrics are rank 0's alone, so not averaged)."""

    if not passes or rank != 0:
        return []
    if passes.config.ray.benchmark_workers:
        log.warning(
            "ray.benchmark_workers applies to runs on Ray (videorl train --ray) only: this run scores its "
            "benchmarks between steps, on its own engine"
        )
    own = engine.engine if isinstance(engine, GroupedEngine) else engine
    return [passes.evaluation(evaluator_runner(own))]


def failure_reason(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, VideorlError) else f"{type(exc).__name__}: {exc}"


# --- in one process: the evaluator on the run's engine --------------------------------------------


def evaluator_runner(engine: Any, *, workers: int = 2, batch_size: int = 8) -> RowRunner:
    """A :data:`RowRunner` through :class:`~videorl.eval.pipeline.Evaluator` on ``engine`` (the run's
    rollout engine, or anything with ``generate(prompts, params)``), with ``videorl eval run``'s
    default concurrency."""
    from videorl.eval.pipeline import Evaluator

    def run(
        task: EvalTask, inputs: RowInputs, run_dir: Path, sampling: SamplingParams, agent: AgentRollout | None
    ) -> BenchmarkResult:
        evaluator = Evaluator(inputs, engine, sampling, workers=workers, batch_size=batch_size, agent=agent)
        return evaluator.run([task], run_dir).results[task.name]

    return run


# --- on Ray: rows to the rollout workers ----------------------------------------------------------
