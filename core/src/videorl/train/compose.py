"""Compose a training run from a config and the installed plugins, then hand plain objects to the loop.

This is the only place where the training path looks components up by name: the model backend
(from the checkpoint's ``model_type``), the rewards (by ``problem_type``), the prompt templates and
the rollout engine. Everything is validated before the first rollout: every dataset row, every
``problem_type``, and in ``preprocessed_only`` mode every video's cache entry.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from videorl import algorithms
from videorl.actor.build import make_actor
from videorl.backend import backend_for_model
from videorl.data import load_samples
from videorl.encoding import EncodedOnRead, PromptEncoder, media_loader
from videorl.errors import ConfigError, DataError, RegistryError
from videorl.hub import resolve_model
from videorl.parallel import Parallel, gather_objects
from videorl.prompt_length import check_cached_prompt_lengths
from videorl.prompts import PromptTemplate
from videorl.rewards.router import RewardRouter
from videorl.rollout.factory import make_rank_engine, make_workflow
from videorl.rollout.per_row import PerRowWorkflow
from videorl.rollout.workflow import RolloutWorkflow
from videorl.runs.checkpoint import CHECKPOINT_DIR, CheckpointManager
from videorl.runs.lock import FolderLock, LockedError
from videorl.runs.records import CompletionLog, MetricsWriter, ProgressBar, write_run_metadata
from videorl.runs.resume import agreed_checkpoint
from videorl.train.benchmarks import BenchmarkPasses, local_evaluations
from videorl.train.data import TrainData
from videorl.train.local import train
from videorl.train.loop import RunIO

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from videorl.actor.policy import Actor
    from videorl.algorithms import Algorithm
    from videorl.backend import ModelBackend, VisionSync
    from videorl.config import TrainConfig
    from videorl.data import Sample
    from videorl.encoding import Prompt
    from videorl.plugins import Plugins
    from videorl.rollout import RolloutEngine
    from videorl.runs.checkpoint import Checkpoint
    from videorl.train.loop import OnStep, PeriodicEvaluation

log = logging.getLogger("videorl.train")


@dataclass
class Training:
    """Everything :func:`videorl.train.local.train` receives; ``evaluations`` run in the loop next to
    validation (:class:`videorl.train.loop.PeriodicEvaluation`)."""

    config: TrainConfig
    actor: Actor
    algorithm: Algorithm
    workflow: RolloutWorkflow
    engine: RolloutEngine
    rewards: RewardRouter
    data: TrainData
    encode: PromptEncoder
    io: RunIO
    dist: Parallel
    engine_shares_actor: bool
    validation: Sequence[Prompt]  # this rank's share, encoded when read (EncodedOnRead)
    vision_sync: VisionSync | None = None  # the actor's hooks (``dummy_calls`` counts text-only forwards)
    evaluations: list[PeriodicEvaluation] = field(default_factory=list)

    def run(self, on_step: OnStep | None = None) -> int:
        """Train (:func:`videorl.train.local.train`), then close the run's writers; the last step."""

        try:
            return train(
                self.config,
                actor=self.actor,
                algorithm=self.algorithm,
                workflow=self.workflow,
                engine=self.engine,
                rewards=self.rewards,
                data=self.data,
                encode=self.encode,
                io=self.io,
                dist=self.dist,
                engine_shares_actor=self.engine_shares_actor,
                validation=self.validation,
                evaluations=self.evaluations,
                on_step=on_step,
            )
        finally:
            self.close()

    def close(self) -> None:
        """Stop the prefetch thread and close the run's writers."""
        self.encode.close()
        close_io(self.io)


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def load_training_samples(config: TrainConfig, rewards: RewardRouter, files: list[str]) -> list[Sample]:
    """Every row of ``files``, validated: fields, ``problem_type`` routed to a reward (error names the
    line and the registered types)."""

    samples: list[Sample] = []
    for file in files:
        if not Path(file).exists():  # a file, or an HF dataset folder
            raise DataError(f"{file}: dataset file not found (data.train_files / data.val_files)")
        samples += load_samples(file, media_root=config.data.media_root)
    if not samples:
        raise DataError(f"no samples in {', '.join(files)}")
    seen: dict[str, str] = {}
    for s in samples:
        if s.id in seen:
            raise DataError(f"{s.origin}: sample id {s.id!r} is used again (first at {seen[s.id]})")
        seen[s.id] = s.origin
    try:
        rewards.validate(samples, ground_truths=True)
    except DataError as exc:
        by_id = {s.id: s.origin for s in samples}
        origin = next((o for i, o in by_id.items() if repr(i) in str(exc)), None)
        raise DataError(f"{origin}: {exc}" if origin else str(exc)) from None
    return samples


def check_cached(samples: list[Sample], encoder: PromptEncoder) -> None:
    """``preprocessed_only``: every video must already be in the cache for this run's parameters."""
    for s in samples:
        for video in s.videos:
            try:
                encoder.media.cache.resolve(video, encoder.media.video_params)
            except Exception as exc:  # the cache's own errors say which parameter differs
                raise DataError(f"{s.origin}: sample {s.id!r}: {exc}") from None


def _dataset_template(spec: str | None, plugins: Plugins) -> PromptTemplate | None:
    """``data.prompt_template``: a ``.jinja`` file, or the name of a registered template."""

    if spec is None:
        return None
    if spec.endswith(".jinja") or Path(spec).is_file():
        if not Path(spec).is_file():
            raise ConfigError(f"data.prompt_template: {spec} does not exist")
        return PromptTemplate("data.prompt_template", path=Path(spec).absolute())
    template: PromptTemplate = plugins.prompt_templates.get(spec)
    return template


def make_backend(config: TrainConfig, plugins: Plugins) -> ModelBackend:
    """The model backend of ``model.family``, or the one serving the checkpoint's ``model_type``."""

    path = resolve_model(config.model.path)  # a Hub id the cache lacks: the error names the download
    if config.model.family:
        backend: ModelBackend = plugins.model_backends.create(config.model.family, path=path)
        return backend
    return backend_for_model(path, plugins.model_backends)


def make_encoder(config: TrainConfig, backend: ModelBackend, plugins: Plugins) -> PromptEncoder:
    """Samples to prompts as the ``data`` section says: frame cache (none: decode on the fly), video and
    image budgets, template, thinking, prompt limit."""

    d = config.data
    return PromptEncoder(
        backend,
        media_loader(d, backend),
        plugins.prompt_templates,
        thinking=d.thinking,
        max_prompt_length=d.max_prompt_length,
        template=_dataset_template(d.prompt_template, plugins),
        rewards=RewardRouter.from_registry(
            plugins.rewards, config.rewards
        ),  # routed types use their rewards' templates
    )


def checkpoint_manager(config: TrainConfig) -> CheckpointManager:
    """The checkpoints of the run in ``output_dir`` (``checkpoints/``), keeping ``trainer.keep_last``."""

    return CheckpointManager(Path(config.output_dir) / CHECKPOINT_DIR, keep_last=config.trainer.keep_last)


def open_checkpoints(
    config: TrainConfig, dist: Parallel | None = None
) -> tuple[CheckpointManager, Path | None]:
    """The run's checkpoints and the one to resume from; a run directory that already holds
    checkpoints is only continued with ``trainer.resume``. Under a process group ``dist`` (a collective)
    the one every rank resumes from: a rank may find its shard of the newest checkpoint damaged, and
    rank 0 cuts the run's logs at this step. Nothing is created here: ``output_dir`` appears with the
    run's first file, once the model, data and engine are ready, so a start that fails leaves no empty
    run directory behind."""

    out, spec = Path(config.output_dir), config.trainer.resume
    checkpoints = checkpoint_manager(config)
    resume_from = (
        checkpoints.resolve_resume(spec) if dist is None else agreed_checkpoint(checkpoints, spec, dist)
    )
    if resume_from is None and checkpoints.latest() is not None:
        raise ConfigError(
            f"{out} already holds checkpoints; continue it with trainer.resume=auto (or --resume auto), "
            "or choose another output_dir"
        )
    return checkpoints, resume_from


@dataclass
class RunStart:
    """What a launcher knows of a run before building anything: its checkpoints and the one it resumes
    from (verified, tensors not yet read)."""

    checkpoints: CheckpointManager
    resume_from: Checkpoint | None
    lock: FolderLock | None = None  # the writer's (rank 0, the Ray controller) lock of output_dir

    def release(self) -> None:
        """Let ``output_dir`` go (after the run, or a start that failed); once."""
        if self.lock is not None:
            self.lock.release()

    @property
    def step(self) -> int:
        """The step the run continues after (0: a new run)."""
        return 0 if self.resume_from is None else self.resume_from.step

    def open_io(self, config: TrainConfig, plugins: Plugins, *, writer: bool) -> RunIO:
        """The run's writers, once the models, data and engines are ready: when ``writer`` (rank 0, the
        Ray controller) ``config.yaml``/``run.json``/``requirements.txt``, the metrics, the progress
        bar (``trainer.progress_bar``) and the completion log (``trainer.log_completions``)."""

        if not writer:
            return RunIO(self.checkpoints, lock=self.lock)
        out, t = Path(config.output_dir), config.trainer
        write_run_metadata(out, config, plugins)
        metrics = MetricsWriter.for_run(out, config, plugins, start_step=self.step)
        progress = ProgressBar(t.max_steps, start_step=self.step) if t.progress_bar else None
        completions = (
            CompletionLog(out, t.log_completions, start_step=self.step) if t.log_completions else None
        )
        return RunIO(self.checkpoints, metrics, progress, completions, lock=self.lock)


def begin_run(config: TrainConfig, ranks: int, ranks_name: str, dist: Parallel | None = None) -> RunStart:
    """The checks every launcher makes first: ``data.rollout_batch_size`` a multiple of the ``ranks``
    training ranks (``ranks_name`` says what sets them), ``output_dir`` locked by the writer (rank 0 of
    ``dist``, or this process outside a group: a second run there is refused, every rank told), and the
    checkpoint to resume from (:func:`open_checkpoints`; agreed over ``dist`` when this process is one of
    a process group)."""
    if config.data.rollout_batch_size % ranks:
        raise ConfigError(
            f"data.rollout_batch_size ({config.data.rollout_batch_size}) must be a multiple of {ranks_name} "
            f"({ranks}): each training rank takes the same share of the prompts"
        )
    lock = _lock_output_dir(config, dist)
    try:
        checkpoints, resume_from = open_checkpoints(config, dist)
        return RunStart(checkpoints, None if resume_from is None else checkpoints.load(resume_from), lock)
    except BaseException:
        if lock is not None:
            lock.release()
        raise


def _lock_output_dir(config: TrainConfig, dist: Parallel | None) -> FolderLock | None:
    """The writer's lock of ``output_dir`` (:class:`FolderLock`); under a process group the other ranks
    learn whether rank 0 has it (a collective) and stop with it when it has not."""
    lock, refused = None, None
    if dist is None or dist.rank == 0:
        try:
            lock = FolderLock.acquire(config.output_dir, "the output_dir")
        except LockedError as exc:
            refused = exc
    if dist is not None and dist.world_size > 1 and dist.has_process_group:
        told = gather_objects(None if refused is None else str(refused), dist)[0]
        if told is not None and refused is None:
            raise LockedError(f"rank 0: {told}")
    if refused is not None:
        raise refused
    return lock


def close_io(io: RunIO) -> None:
    """Close the run's writers (the metrics' trackers, the progress bar) and let ``output_dir`` go."""
    try:
        if io.metrics is not None:
            io.metrics.close()
        if io.progress is not None:
            io.progress.close()
    finally:
        if io.lock is not None:
            io.lock.release()


def load_datasets(
    config: TrainConfig,
    rewards: RewardRouter,
    encoder: PromptEncoder,
    rows: Callable[[list[Sample]], None] | None = None,
) -> tuple[list[Sample], list[Sample]]:
    """The training and validation samples, validated, each with its prompt text (in
    ``preprocessed_only`` mode every video must be in the cache); ``rows`` sees them all first (the
    row workflows are resolved there, so the prompt-length check counts the tools they offer)."""
    d = config.data
    samples = load_training_samples(config, rewards, d.train_files)
    if 0 < len(samples) < d.rollout_batch_size:
        log.warning(
            "data.rollout_batch_size is %d but the training data has %d samples: each step repeats every "
            "sample about %.3g× (%d prompts × %d responses = %d per step). Set data.rollout_batch_size "
            "(and actor.global_batch_size) to at most %d for a step that sees each sample once.",
            d.rollout_batch_size,
            len(samples),
            d.rollout_batch_size / len(samples),
            d.rollout_batch_size,
            config.rollout.n,
            d.rollout_batch_size * config.rollout.n,
            len(samples),
        )
    val_samples = load_training_samples(config, rewards, d.val_files) if d.val_files else []
    if rows is not None:
        rows(samples + val_samples)
    encoder.check(samples + val_samples)
    if d.source_mode == "preprocessed_only":
        check_cached(samples + val_samples, encoder)
    if encoder.max_prompt_length is not None:  # at load, not mid-step: the cache's headers give the sizes
        check_cached_prompt_lengths(
            samples + val_samples, encoder, encoder.max_prompt_length, "data.max_prompt_length"
        )
    return samples, val_samples


@dataclass
class RunParts:
    """What every launcher builds first, from the config and the plugins, before any model loads: the
    one place where a run's components are looked up by name (the loop, the drivers, the actor and
    the workers receive the objects)."""

    start: RunStart
    algorithm: Algorithm
    workflow: RolloutWorkflow
    backend: ModelBackend
    rewards: RewardRouter
    encoder: PromptEncoder
    samples: list[Sample]
    val_samples: list[Sample]
    benchmarks: BenchmarkPasses

    def data(self, config: TrainConfig, rank: int, size: int, *, prefetch: bool) -> TrainData:
        """Data-parallel group ``rank`` of ``size``'s order over the training samples."""
        d = config.data
        return TrainData(
            self.samples, seed=config.seed, shuffle=d.shuffle, rank=rank, world_size=size,
            prefetcher=self.encoder if prefetch else None,
        )  # fmt: skip


def row_workflows(
    plugins: Plugins, config: TrainConfig, workflow: RolloutWorkflow, samples: Sequence[Sample]
) -> RolloutWorkflow:
    """The run's workflow, or, when rows name other workflows (``"workflow": "tool_agent"``), a
    :class:`~videorl.rollout.per_row.PerRowWorkflow` over the run's and theirs (each made once, by
    :func:`make_workflow`). Every row's name is checked against the registry (an unknown one is a
    ``DataError`` naming the row and the registered workflows, with the closest) and rewritten to
    the registered spelling."""
    default = plugins.rollout_workflows.canonical(config.rollout.workflow)
    workflows: dict[str, RolloutWorkflow] = {default: workflow}
    for sample in samples:
        if sample.workflow is None:
            continue
        try:
            sample.workflow = plugins.rollout_workflows.canonical(sample.workflow)
        except RegistryError as exc:
            raise DataError(f"{sample.origin} (sample {sample.id!r}): workflow: {exc}") from None
        if sample.workflow not in workflows:
            workflows[sample.workflow] = make_workflow(plugins, sample.workflow, config)
    return workflow if len(workflows) == 1 else PerRowWorkflow(default, workflows)


def compose_run(
    config: TrainConfig,
    plugins: Plugins,
    *,
    ranks: int,
    ranks_name: str,
    dist: Parallel | None = None,
    seed: int | None = None,
) -> RunParts:
    """The composition root both launchers use (:func:`build_training`, and
    :func:`videorl.cluster.launch.train_on_ray`): the algorithm resolved (its preset applied, as the
    loop reads it and ``config.yaml`` records it; resolving twice changes nothing) and built, the
    checks of :func:`begin_run` over ``ranks`` data-parallel groups, the backend, rewards, prompt
    encoder, validated datasets and benchmark rows. ``seed``: seed every generator first."""
    config.algorithm = algorithms.resolve(config.algorithm, plugins)
    algorithm = algorithms.build(config.algorithm, plugins)
    workflow = make_workflow(plugins, config.rollout.workflow, config)
    start = begin_run(config, ranks, ranks_name, dist)
    try:
        if seed is not None:
            seed_everything(seed)
        backend = make_backend(config, plugins)
        rewards = RewardRouter.from_registry(plugins.rewards, config.rewards)
        encoder = make_encoder(config, backend, plugins)
        parts: list[RolloutWorkflow] = [workflow]

        def rows(every: list[Sample]) -> None:  # the rows' workflows, and the tools their prompts offer
            parts[0] = row_workflows(plugins, config, workflow, every)
            encoder.prompt_tools = getattr(parts[0], "prompt_tools", None)

        samples, val_samples = load_datasets(config, rewards, encoder, rows)
        workflow = parts[0]
        benchmarks = BenchmarkPasses(config, plugins, backend, resumed_from=start.step)  # rows first
    except BaseException:
        start.release()  # a start that failed: output_dir is free again
        raise
    return RunParts(start, algorithm, workflow, backend, rewards, encoder, samples, val_samples, benchmarks)


def build_training(config: TrainConfig, plugins: Plugins, *, dist: Parallel | None = None) -> Training:
    """Build the actor, engine, rewards, data and run files that ``config`` describes, for one process
    or one torchrun rank ``dist``."""
    dist = dist or Parallel()
    parts = compose_run(
        config, plugins, ranks=dist.data_size, ranks_name="the number of data-parallel groups", dist=dist,
        seed=config.seed + dist.rank,
    )  # fmt: skip
    try:
        return _assemble(config, plugins, parts, dist)
    except BaseException:
        parts.start.release()  # a start that failed: output_dir is free again
        raise


def _assemble(config: TrainConfig, plugins: Plugins, parts: RunParts, dist: Parallel) -> Training:
    """:func:`build_training` once the run's parts are composed: the actor, engine and run files."""
    backend, encoder, val_samples = parts.backend, parts.encoder, parts.val_samples
    # encoded when a validation pass reads them, not here: start-up holds none of their frames
    validation = EncodedOnRead(val_samples[dist.data_rank :: dist.data_size], encoder)
    # a sequence-parallel group's other ranks take the leader's episodes: nothing of theirs to prefetch
    prefetch = config.data.prefetch and dist.is_sequence_leader
    data = parts.data(config, dist.data_rank, dist.data_size, prefetch=prefetch)

    if (
        0 < len(val_samples) < dist.world_size
        and int(config.rollout.engine_options.get("tensor_parallel_size", 1)) > 1
    ):
        raise ConfigError(  # a tensor-parallel group generates together: each of its ranks needs prompts
            f"data.val_files hold {len(val_samples)} sample(s) for {dist.world_size} processes; with "
            "tensor-parallel engines every process needs at least one: add samples or set data.val_files=[]"
        )
    actor, vision_sync = make_actor(config, backend, dist)
    engine, shares = make_rank_engine(config, plugins, backend, actor.model, dist)

    io = parts.start.open_io(config, plugins, writer=dist.rank == 0)
    return Training(
        config, actor, parts.algorithm, parts.workflow, engine, parts.rewards, data, encoder, io, dist,
        shares, validation, vision_sync, evaluations=local_evaluations(parts.benchmarks, engine, dist.rank),
    )  # fmt: skip
