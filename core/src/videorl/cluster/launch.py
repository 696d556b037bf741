"""Training on Ray: the launcher of ``videorl train --ray``.

It composes the run with the same root as one process (:func:`videorl.train.compose.compose_run`:
the algorithm, backend, rewards, datasets and benchmark rows, checked before any worker starts), then
starts or joins Ray, starts the worker groups (:class:`~videorl.cluster.runtime.Cluster`), and runs
the loop (:func:`videorl.train.loop.run`) with a :class:`~videorl.cluster.controller.Controller`
(or, with ``trainer.max_staleness``, the asynchronous one) as its driver.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from videorl.atomic import atomic_write_text
from videorl.cluster import wire
from videorl.cluster.benchmark_rows import ray_evaluations
from videorl.cluster.controller import WORKERS_FILE, Controller, absolute_paths
from videorl.cluster.groups import ActorGroups
from videorl.cluster.runtime import Cluster, WorkerFailure, cpus_needed, start_ray
from videorl.errors import ConfigError, VideorlError
from videorl.rollout.single_turn import SingleTurn
from videorl.rollout.tool_agent import NO_BASELINE, ToolAgent
from videorl.runs.manifest import STATE_FILE
from videorl.runs.resume import group_positions

if TYPE_CHECKING:
    from videorl.config import TrainConfig
    from videorl.plugins import Plugins
    from videorl.runs.checkpoint import Checkpoint
    from videorl.train.compose import RunParts
    from videorl.train.data import TrainData
    from videorl.train.loop import OnStep, PeriodicEvaluation


def _refuse_local_only(config: TrainConfig, parts: RunParts) -> None:
    """Refuse, before Ray starts, what runs in one process or under torchrun only: a workflow other
    than single_turn or tool_agent (the workers run those two), ReMax's baseline with tool_agent, a
    benchmark's workflow."""
    if not isinstance(parts.workflow, (SingleTurn, ToolAgent)):
        parts.start.release()
        name = getattr(parts.workflow, "name", config.rollout.workflow)  # a mixed dataset: a+b
        raise ConfigError(
            f"rollout.workflow {name!r} (the run's or its rows') runs in one process or under torchrun; "
            "on Ray the workers run single_turn or tool_agent as the run's one workflow so far (rows may "
            "not mix workflows): train without --ray"
        )
    if isinstance(parts.workflow, ToolAgent) and parts.algorithm.greedy_baseline:
        parts.start.release()
        raise ConfigError(NO_BASELINE)
    if parts.benchmarks.agents:  # the rollout workers answer a pass's rows in one turn
        parts.start.release()
        raise ConfigError(
            f"trainer.benchmarks: {', '.join(sorted(parts.benchmarks.agents))}: a workflow answers rows in "
            "one process or under torchrun; on Ray the rollout workers answer single-turn rows only so far "
            "(workflow: null)"
        )


def train_on_ray(
    config: TrainConfig,
    plugins: Plugins,
    *,
    address: str | None = None,
    on_step: OnStep | None = None,
    driver: type[Controller] | None = None,
) -> int:
    """Train as ``config`` says with a controller here and worker groups on Ray; the last step done.

    Everything that can be checked without the workers is checked first (datasets, rewards, the frame
    cache in ``preprocessed_only`` mode, the checkpoint to resume), then Ray is started or joined.
    ``driver``: the controller class; default :class:`Controller`, or with ``trainer.max_staleness``
    the asynchronous :class:`~videorl.cluster.async_driver.AsyncController`.
    """
    groups = ActorGroups.of(config)  # before anything starts: the workers must form whole groups
    import ray

    from videorl.cluster.async_driver import AsyncController
    from videorl.cluster.benchmark_group import BenchmarkGroup
    from videorl.train.compose import close_io, compose_run
    from videorl.train.loop import run

    config = absolute_paths(config)
    named = "ray.actor_workers" + (" / actor.sequence_parallel_size" if groups.sp_size > 1 else "")
    parts = compose_run(config, plugins, ranks=groups.count, ranks_name=named)
    _refuse_local_only(config, parts)
    begun, backend, val, benchmarks = parts.start, parts.backend, parts.val_samples, parts.benchmarks
    data = [parts.data(config, g, groups.count, prefetch=False) for g in range(groups.count)]
    if begun.resume_from is not None:
        _resume_positions(begun.resume_from, groups, data)

    started = start_ray(config.ray, address, cpus_needed(config))
    cluster = Cluster(config, plugins)
    clean = False
    io = controller = None
    evaluations: list[PeriodicEvaluation] = []
    try:
        cluster.start()
        atomic_write_text(
            Path(config.output_dir) / WORKERS_FILE, wire.dumps(cluster.workers()).decode() + "\n"
        )
        io = begun.open_io(config, plugins, writer=True)
        driver = driver or (AsyncController if config.trainer.max_staleness > 0 else Controller)
        controller = driver(
            config, cluster, backend, data, val, parts.rewards.canonical_type, io.completions,
            algorithm=parts.algorithm, agent=isinstance(parts.workflow, ToolAgent),
        )  # fmt: skip
        if begun.resume_from is not None:
            controller.resume(begun.resume_from)
        evaluations = ray_evaluations(benchmarks, controller)
        last = run(config, controller, io, begun.step, evaluations=evaluations, on_step=on_step)
        clean = True
        return last
    except WorkerFailure as exc:
        raise VideorlError(f"{exc}. {_resume_hint(exc, begun.checkpoints.latest())}") from None
    finally:
        for evaluation in evaluations:
            if isinstance(evaluation, BenchmarkGroup):
                evaluation.close()  # a job in flight keeps its weights on disk for --resume
        if controller is not None:
            controller.close()  # after a failure the workers are ended next
        if io is not None:
            close_io(io)
        cluster.shutdown(clean=clean)
        begun.release()  # output_dir's lock (close_io releases it once the writers are open)
        if started:
            ray.shutdown()


def _resume_hint(failure: WorkerFailure, latest: Path | None) -> str:
    """What to do after ``failure``: start again, or resume from the last complete checkpoint."""
    if latest is None:
        return "no checkpoint was written yet: start the run again" + (
            "" if failure.died else " once the cause is fixed"
        )
    if failure.died:
        return f"the last complete checkpoint is {latest}: continue the run with --resume auto"
    return (
        f"the last complete checkpoint is {latest}: once the cause is fixed, --resume auto continues from it"
    )


def _resume_positions(checkpoint: Checkpoint, groups: ActorGroups, data: list[TrainData]) -> None:
    """Each data group's position from ``checkpoint``, mapped from the checkpoint's data groups to
    this run's (another ``actor.sequence_parallel_size`` takes the rest of the epoch in its own shares,
    as under torchrun); refused before Ray starts when it was written by another number of workers
    (each worker restores its own RNG state and model shard)."""
    checkpoint.rank_data_states(groups.workers, "ray.actor_workers={n}")
    positions = group_positions(checkpoint)
    for d in data:
        d.load_group_positions(positions, f"{checkpoint.path}/{STATE_FILE}")
