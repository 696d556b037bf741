"""The training loop: one ``for`` over the steps for every launcher; a *step driver* runs each step.

::

    run(config, driver, io, start, dist=..., evaluations=..., on_step=...)
      for step in start + 1 .. trainer.max_steps:
          metrics  = driver.step_once(step, timer)      rollout, reward, advantage, update, weight sync
          metrics |= driver.validate(step)              every trainer.val_every steps and at the last
          metrics |= evaluation(step)                   each evaluation whose due(step, last_step) says so
          metrics |= time/<stage>, time/step            averaged over the ranks (torchrun)
          log (rank 0), progress bar (rank 0), on_step(step, metrics)
          driver.save(step)                             every trainer.save_every steps and at the last

The loop owns the step range, the order above, the timing and the writers; a driver owns what a step
does and where it runs. Three drivers exist:

- :class:`videorl.train.local.LocalStep`: this process's share of the prompts, its own engine and actor
  (one process, or one torchrun rank: every rank runs this loop, and ``dist`` averages the metrics);
- :class:`videorl.cluster.controller.Controller`: the Ray controller, every rank's share through worker
  groups; it returns metrics already averaged over the actor ranks (the loop runs with one ``Parallel()``);
- :class:`videorl.cluster.async_driver.AsyncController`: the Ray controller with the rollouts of the
  next ``trainer.max_staleness`` steps generated while the actor updates.

**The driver contract** (:class:`StepDriver`):

- ``step_once(step, timer) -> metrics``: one training step. Stage times go into ``timer``
  (``with timer("rollout"): ...``, or ``timer.seconds[stage] += s`` for times measured elsewhere);
  the loop adds ``time/<stage>`` and ``time/step``. The driver sets the learning rate, runs the
  first-step parity check and refreshes its engines itself: those happen where the actor lives.
- ``has_validation``: whether this driver (this rank) holds validation prompts; ``validate(step)``
  returns the ``val/*`` metrics, timed by the loop as ``time/validation``.
- ``save(step)``: write the step's checkpoint (every rank of a torchrun run calls it: it gathers).
- Anything else a driver reports is a metric of its step: an asynchronous driver (rollouts ahead of
  the update) returns its weight versions and staleness from ``step_once`` and drains or records its
  in-flight rollouts in ``save``; the loop needs nothing more from it. Resuming (the start step, the
  engines brought up to the loaded weights) happens before :func:`run`, in the launcher.

**Periodic evaluations** (:class:`PeriodicEvaluation`, e.g. the benchmark passes of
:mod:`videorl.train.benchmarks`) run after validation and before the step's checkpoint, in the order
given: ``due(step, last_step)`` decides, ``evaluation(step)`` returns its metrics (e.g.
``bench/<name>/<metric>``), merged into the step's row; the loop records its wall time as
``time/<name>``. Rules of the contract:

- under torchrun every rank calls it (the engines are per rank): metrics are then averaged over the
  ranks that report them, so report on rank 0 only, or the same values on every rank;
- an exception stops the run; a pass that must not (a missing data root, unless ``strict``) catches its
  own errors and says so in the log and its metrics;
- it generates with the policy's current weights through the driver: locally with
  ``LocalStep.engine`` (a :class:`~videorl.rollout.RolloutEngine`; hand it to
  :class:`~videorl.eval.pipeline.Evaluator` as is); on Ray with
  :meth:`~videorl.cluster.controller.Controller.call_rollouts` ``(stage, method, requests)``, which
  sends one plain-value request (:mod:`~videorl.cluster.wire`) to each rollout worker and returns their
  replies: the worker method it names encodes its rows where the frames are, and generates with
  ``self.engine``.

Register evaluations with ``evaluations=`` of :func:`run`: locally through
:class:`videorl.train.compose.Training` (``Training.evaluations``, passed by ``Training.run``), on Ray
where :func:`videorl.cluster.launch.train_on_ray` calls :func:`run`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from videorl.parallel import Parallel, average_over_ranks
from videorl.runs.checkpoint import CheckpointManager
from videorl.runs.records import CompletionLog, MetricsWriter, ProgressBar
from videorl.timing import StageTimer

if TYPE_CHECKING:
    from videorl.config import TrainConfig
    from videorl.runs.lock import FolderLock

    pass

OnStep = Callable[[int, dict[str, float]], None]
"""``on_step(step, metrics)``: called on every rank after each step is logged, before its checkpoint."""


class StepDriver(Protocol):
    """What the loop asks of a launcher's step (see the module docstring)."""

    @property
    def has_validation(self) -> bool:
        """Whether :meth:`validate` has prompts to score (on this rank)."""
        ...

    def step_once(self, step: int, timer: StageTimer) -> dict[str, float]:
        """Run training step ``step``; its metrics (stage times into ``timer``)."""
        ...

    def validate(self, step: int) -> dict[str, float]:
        """Score the validation prompts with the current weights: the ``val/*`` metrics."""
        ...

    def save(self, step: int) -> None:
        """Write the checkpoint of ``step``."""
        ...


class PeriodicEvaluation(Protocol):
    """A pass the loop runs on some steps, next to validation (see the module docstring)."""

    @property
    def name(self) -> str:
        """Its name: the loop records its wall time as ``time/<name>``."""
        ...

    def due(self, step: int, last_step: int) -> bool:
        """Whether to run after ``step`` (``last_step``: the run's last, ``trainer.max_steps``)."""
        ...

    def __call__(self, step: int) -> dict[str, float]:
        """Run the pass with the current weights; its metrics for the step's row."""
        ...


def periodic_due(step: int, every: int, last_step: int, *, at_last: bool = False) -> bool:
    """Whether something done every ``every`` steps and at the last step is due after ``step``.

    ``every`` 0 turns the periodic steps off: then only the last step is due with ``at_last`` (a
    checkpoint, a benchmark pass: the final weights are always saved and scored), none without it
    (``trainer.val_every``)."""
    if every <= 0:
        return at_last and step == last_step
    return step % every == 0 or step == last_step


def run(
    config: TrainConfig,
    driver: StepDriver,
    io: RunIO,
    start: int,
    *,
    dist: Parallel | None = None,
    evaluations: Sequence[PeriodicEvaluation] = (),
    on_step: OnStep | None = None,
) -> int:
    """Steps ``start + 1`` to ``config.trainer.max_steps`` with ``driver``; the last step done.

    ``io``'s writers are used on rank 0 of ``dist`` (default: one process); ``start`` is the step of
    the checkpoint the launcher resumed from (0: none)."""
    dist = dist or Parallel()
    last, every = config.trainer.max_steps, config.trainer.val_every
    names = [e.name for e in evaluations]
    if len(set(names)) != len(names) or "validation" in names or "step" in names:
        raise ValueError(f"evaluation names must be distinct and not 'validation' or 'step': {names}")
    writes = dist.rank == 0
    for step in range(start + 1, last + 1):
        timer = StageTimer(io.progress.stage if writes and io.progress is not None else None)
        step_start = time.perf_counter()
        metrics = driver.step_once(step, timer)
        if driver.has_validation and periodic_due(step, every, last):
            with timer("validation"):
                metrics.update(driver.validate(step))
        for evaluation in evaluations:
            if evaluation.due(step, last):
                with timer(evaluation.name):
                    metrics.update(evaluation(step))
        timer.seconds["step"] = time.perf_counter() - step_start
        metrics.update({f"time/{k}": v for k, v in timer.seconds.items()})
        metrics = average_over_ranks(metrics, dist)
        if writes and io.metrics is not None:
            io.metrics.log(step, metrics)
        if writes and io.progress is not None:
            io.progress.update(
                step,
                reward=metrics.get("reward/overall"),
                stages={k: v for k, v in timer.seconds.items() if k != "step"},
                acc=metrics.get("accuracy/overall", 0.0),
            )
        if on_step is not None:
            on_step(step, metrics)
        if periodic_due(step, config.trainer.save_every, last, at_last=True):
            driver.save(step)
    return last


@dataclass
class RunIO:
    """Where the loop writes: checkpoints, metrics, a progress bar (rank 0 only writes)."""

    checkpoints: CheckpointManager
    metrics: MetricsWriter | None = None
    progress: ProgressBar | None = None
    completions: CompletionLog | None = None  # trainer.log_completions
    lock: FolderLock | None = None  # output_dir's, released when the run's writers close
