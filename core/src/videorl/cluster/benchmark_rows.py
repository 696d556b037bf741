"""Benchmark passes on Ray: the rows of a pass are shared among workers that encode and generate them
(:class:`WorkerBenchmarks`, in the worker process), and only row ids and token ids cross; the
controller's side picks between benchmark workers of their own
(:class:`~videorl.cluster.benchmark_group.BenchmarkGroup`) and the rollout engines between steps
(:func:`ray_evaluations`). The passes themselves are :class:`videorl.train.benchmarks.BenchmarkPasses`,
as in one process."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.cluster import wire
from videorl.errors import ConfigError
from videorl.rollout import SamplingParams
from videorl.rollout.placement import GroupedEngine
from videorl.train.benchmarks import (
    CHUNK_ROWS,
    BenchmarkPasses,
    RowRunner,
    benchmark_cache,
    failure_reason,
    row_inputs,
)

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.benchmark import BenchmarkRow
    from videorl.cluster.controller import Controller
    from videorl.config import TrainConfig
    from videorl.eval.agent import AgentRollout
    from videorl.eval.inputs import RowInputs
    from videorl.eval.pipeline import EvalTask
    from videorl.eval.scoring import BenchmarkResult
    from videorl.plugins import Plugins
    from videorl.rollout import Completion
    from videorl.train.loop import PeriodicEvaluation


@dataclass
class RowOutcome:
    """A row's answer from a worker, or the stage (load, encode, engine) where it failed and why."""

    completion: Completion | None = None
    error: str | None = None
    stage: str | None = None

    def to_wire(self) -> list[Any]:

        c = None if self.completion is None else wire.completion_out(self.completion)
        return [c, self.error, self.stage]

    @classmethod
    def from_wire(cls, value: Sequence[Any]) -> RowOutcome:

        c, error, stage = value
        return cls(None if c is None else wire.completion_in(c), error, stage)


GenerateRows = Callable[["EvalTask", Sequence["BenchmarkRow"], "SamplingParams", bool], list[RowOutcome]]
"""``generate_rows(task, rows, sampling, thinking)``: each row's :class:`RowOutcome`, in order (the
controller's calls to its rollout workers, :func:`rows_request`)."""


def rows_runner(generate_rows: GenerateRows, chunk: int = CHUNK_ROWS) -> RowRunner:
    """A :data:`RowRunner` whose rows are answered by ``generate_rows`` (on Ray: the rollout workers),
    ``chunk`` at a time, each answer recorded as the evaluator records it."""
    from videorl.eval.pipeline import prediction_record, score_tasks
    from videorl.eval.predictions import append_prediction, read_predictions
    from videorl.eval.results import predictions_path

    def run(
        task: EvalTask, inputs: RowInputs, run_dir: Path, sampling: SamplingParams, agent: AgentRollout | None
    ) -> BenchmarkResult:
        if agent is not None:
            raise ConfigError(
                f"trainer.benchmarks: {task.name}: workflow {agent.name} is answered in one process or "
                "with torchrun; on Ray the rollout workers answer single-turn rows only (set its workflow "
                "to null there)"
            )
        path = predictions_path(run_dir, task.name)
        done = {i for i, p in read_predictions(path).items() if not p.failed} if path.exists() else set()
        pending = [row for row in task.rows if row.id not in done]
        tokenizer = inputs.backend.processor.tokenizer
        for start in range(0, len(pending), chunk):
            rows = pending[start : start + chunk]
            outcomes = generate_rows(task, rows, sampling, inputs.thinking)
            for row, out in zip(rows, outcomes, strict=True):
                record = prediction_record(
                    task.benchmark, row, out.completion, tokenizer, error=out.error, stage=out.stage
                )
                append_prediction(path, record)
        return score_tasks([task], run_dir)[task.name]

    return run


def rows_request(
    task: EvalTask, rows: Sequence[BenchmarkRow], sampling: SamplingParams, thinking: bool
) -> dict[str, Any]:
    """The message asking a rollout worker for ``rows`` of ``task`` (:meth:`WorkerBenchmarks.generate`)."""
    from dataclasses import asdict

    return {
        "benchmark": task.name,
        "data_root": str(task.data_root),
        "ids": [r.id for r in rows],
        "sampling": asdict(sampling),
        "thinking": thinking,
    }


AskWorkers = Callable[[str, list[dict[str, Any]]], list[Any]]
"""``ask(stage, requests)``: send ``requests[i]`` (:func:`rows_request`, or ``{}``) to worker ``i`` of a
group, each to its ``generate_benchmark``; their decoded replies in order."""


def shared_rows(ask: AskWorkers, count: int, hosts: Sequence[int]) -> GenerateRows:
    """A :data:`GenerateRows` that shares each call's rows among workers ``hosts`` of a group of
    ``count`` (those hosting an engine), through ``ask``."""

    def generate_rows(
        task: EvalTask, rows: Sequence[BenchmarkRow], sampling: SamplingParams, thinking: bool
    ) -> list[RowOutcome]:
        shares = [list(rows[i :: len(hosts)]) for i in range(len(hosts))]
        requests: list[dict[str, Any]] = [{} for _ in range(count)]
        for host, share in zip(hosts, shares, strict=True):
            requests[host] = rows_request(task, share, sampling, thinking)
        replies = ask(f"benchmark {task.name}", requests)
        answers = {}
        for host, share in zip(hosts, shares, strict=True):
            answers.update(
                {row.id: RowOutcome.from_wire(r) for row, r in zip(share, replies[host], strict=True)}
            )
        return [answers[row.id] for row in rows]

    return generate_rows


def ray_evaluations(passes: BenchmarkPasses, controller: Controller) -> list[PeriodicEvaluation]:
    """The evaluations of a Ray run. With benchmark workers (``ray.benchmark_workers``), the passes run
    on them beside training (:class:`~videorl.cluster.benchmark_group.BenchmarkGroup`). Otherwise each
    pass's rows are shared among the rollout workers (those hosting an engine: one per tensor-parallel
    group when colocated), which encode and answer them with the engines' current weights
    (``Worker.generate_benchmark``) between two steps."""
    if not passes:
        return []
    if controller.cluster.benchmarkers:
        from videorl.cluster.benchmark_group import BenchmarkGroup

        return [BenchmarkGroup(passes, controller)]
    count = controller.rollout_worker_count
    tp = int(passes.config.rollout.engine_options.get("tensor_parallel_size", 1))
    hosts = list(range(0, count, tp if controller.cluster.colocated else 1))

    def ask(stage: str, requests: list[dict[str, Any]]) -> list[Any]:
        return controller.call_rollouts(stage, "generate_benchmark", requests)

    return [passes.evaluation(rows_runner(shared_rows(ask, count, hosts), CHUNK_ROWS * len(hosts)))]


class WorkerBenchmarks:
    """A rollout worker's side of a pass on Ray: the benchmarks' rows (loaded once), encoded from the
    frame cache here and answered by this worker's engine."""

    def __init__(self, config: TrainConfig, plugins: Plugins, backend: ModelBackend) -> None:
        self.config, self.registry, self.backend = config, plugins.benchmarks, backend
        self.cache = benchmark_cache(config)
        self._tasks: dict[tuple[str, str], tuple[EvalTask, dict[str, BenchmarkRow]]] = {}

    def generate(self, engine: Any, message: Mapping[str, Any]) -> list[list[Any]]:
        """Answer ``message`` (:func:`rows_request`) with ``engine``: each row's
        :class:`RowOutcome`, wired."""
        from videorl.eval.pipeline import load_task

        if not message.get("ids"):
            return []  # a worker without rows in this call
        if isinstance(engine, GroupedEngine):  # its leader: the controller asks no other rank
            engine = engine.engine
        key = (message["benchmark"], message["data_root"])
        if key not in self._tasks:
            task = load_task(self.registry, *key)
            self._tasks[key] = task, {r.id: r for r in task.rows}
        task, rows = self._tasks[key]
        inputs = row_inputs(self.config, self.backend, self.cache, bool(message["thinking"]))
        outcomes = [RowOutcome() for _ in message["ids"]]
        encoded: list[tuple[int, Any]] = []
        for i, row_id in enumerate(message["ids"]):
            stage = "load"
            try:
                prompt = inputs.prompt(task.benchmark, rows[row_id], f"{task.name}:{row_id}")
                stage = "encode"
                encoded.append((i, self.backend.encode(prompt)))
            except Exception as exc:  # this row fails, the others are answered
                outcomes[i] = RowOutcome(error=failure_reason(exc), stage=stage)
        self._answer(engine, encoded, outcomes, SamplingParams(**message["sampling"]))
        return [o.to_wire() for o in outcomes]

    def _answer(
        self,
        engine: Any,
        encoded: list[tuple[int, Any]],
        outcomes: list[RowOutcome],
        sampling: SamplingParams,
    ) -> None:
        """Generate for every encoded row; a batch that raises is retried one row at a time, as the
        evaluator does, so one bad row cannot fail the others."""
        if not encoded:
            return
        try:
            groups = engine.generate([e for _, e in encoded], sampling)
        except Exception as exc:
            if len(encoded) == 1:
                outcomes[encoded[0][0]] = RowOutcome(
                    error=f"engine error: {failure_reason(exc)}", stage="engine"
                )
                return
            for item in encoded:
                self._answer(engine, [item], outcomes, sampling)
            return
        for (i, _), group in zip(encoded, groups, strict=True):
            outcomes[i] = RowOutcome(completion=group[0])
