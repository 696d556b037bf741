"""The driver of one process, or of one torchrun rank: :class:`LocalStep` runs a step on this rank's share
of the prompts (encode, roll out with the rank's engine, score here, advantages, the actor's half of
the step), and :func:`train` repeats it in :func:`videorl.train.loop.run`. On Ray,
:class:`videorl.cluster.controller.Controller` drives the same stages across worker processes.

It receives plain, already-built objects (``videorl.train.compose`` builds them) and looks nothing up
by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from videorl.actor.policy import refresh_engine
from videorl.actor.step import train_step
from videorl.parallel import Parallel
from videorl.rollout.collect import collect_groups, local_rollout, sequence_group_rollout
from videorl.rollout.scoring import local_scorer
from videorl.runs.resume import resume, save_checkpoint
from videorl.timing import StageTimer
from videorl.train.loop import RunIO, run
from videorl.train.step import assign_advantages, evaluate, step_metrics

if TYPE_CHECKING:
    from videorl.actor.policy import Actor
    from videorl.algorithms import Algorithm
    from videorl.config import TrainConfig
    from videorl.encoding import Prompt
    from videorl.rewards.router import RewardRouter
    from videorl.rollout import RolloutEngine
    from videorl.rollout.workflow import RolloutWorkflow
    from videorl.train.data import TrainData
    from videorl.train.loop import OnStep, PeriodicEvaluation


class LocalStep:
    """The :class:`~videorl.train.loop.StepDriver` of one process, or of one torchrun rank: this rank's
    share of the prompts, rolled out with its engine, scored here, and its actor's update.

    ``engine_shares_actor``: the engine generates with the actor's own module (one process, no copy),
    so its weights never need a refresh. ``validation`` prompts are this rank's share, scored greedily
    (``val/*`` metrics) when the loop says."""

    def __init__(
        self,
        config: TrainConfig,
        *,
        actor: Actor,
        algorithm: Algorithm,
        workflow: RolloutWorkflow,
        engine: RolloutEngine,
        rewards: RewardRouter,
        data: TrainData,
        encode: Callable[[Any], Prompt],
        io: RunIO,
        dist: Parallel | None = None,
        engine_shares_actor: bool = False,
        validation: Sequence[Prompt] = (),
    ) -> None:
        self.config, self.actor, self.engine, self.rewards = config, actor, engine, rewards
        self.algorithm, self.workflow = algorithm, workflow
        self.data, self.encode, self.io, self.dist = data, encode, io, dist or Parallel()
        self.engine_shares_actor, self.validation = engine_shares_actor, validation  # encoded when read
        self.scorer = local_scorer(rewards, actor.backend)
        self._parity_due = config.rollout.parity_check != "off"  # on this process's first step

    @property
    def has_validation(self) -> bool:
        return bool(self.validation)

    def resume(self) -> int:
        """Load the checkpoint ``trainer.resume`` names (``auto``: the latest) into the actor, the data
        and the RNG; its step (0: none). An engine of its own, loaded with the base model, gets the
        actor's weights."""
        state = self.actor.checkpoint_state()
        start = resume(self.config.trainer.resume, state, self.io.checkpoints, self.dist, data=self.data)
        if start > 0 and not self.engine_shares_actor:
            refresh_engine(self.actor, self.engine)
        return start

    def step_once(self, step: int, timer: StageTimer) -> dict[str, float]:
        config, actor, engine, dist = self.config, self.actor, self.engine, self.dist
        prompts_per_rank = max(1, config.data.rollout_batch_size // dist.data_size)
        rollout = sequence_group_rollout(
            local_rollout(
                config, self.workflow, engine, self.scorer, actor.backend, self.encode, timer,
                self.algorithm.greedy_baseline,
            ),
            dist,
        )  # fmt: skip
        kept, extra = collect_groups(config, step, prompts_per_rank, self.data, rollout, dist.data_rank)
        flat = assign_advantages(config, self.algorithm, kept)
        actor_metrics = train_step(
            config, actor, self.algorithm, flat, dist, timer, step=step,
            engine=None if self.engine_shares_actor else engine, parity_check=self._parity_due,
        )  # fmt: skip
        self._parity_due = False  # the first step of this process only, after a resume too
        if dist.rank == 0 and self.io.completions is not None:
            decode = partial(actor.backend.processor.tokenizer.decode, skip_special_tokens=True)
            self.io.completions.log(step, flat, decode)
        return {**step_metrics(flat, canonical=self.rewards.canonical_type), **actor_metrics, **extra}

    def validate(self, step: int) -> dict[str, float]:
        return evaluate(
            self.validation,
            self.engine,
            self.scorer,
            self.config.rollout.max_response_length,
            self.rewards.canonical_type,
        )

    def save(self, step: int) -> None:
        state, last = self.actor.checkpoint_state(), self.config.trainer.max_steps
        save_checkpoint(
            step, state, self.io.checkpoints, self.dist, data_state=self.data.state_dict(), wait=step == last
        )


def train(
    config: TrainConfig,
    *,
    actor: Actor,
    algorithm: Algorithm,
    workflow: RolloutWorkflow,
    engine: RolloutEngine,
    rewards: RewardRouter,
    data: TrainData,
    encode: Callable[[Any], Prompt],
    io: RunIO,
    dist: Parallel | None = None,
    engine_shares_actor: bool = False,
    validation: Sequence[Prompt] = (),
    evaluations: Sequence[PeriodicEvaluation] = (),
    on_step: OnStep | None = None,
) -> int:
    """Train with :class:`LocalStep` in :func:`videorl.train.loop.run` until ``trainer.max_steps``,
    resuming when ``trainer.resume`` says so; the last step done."""
    driver = LocalStep(
        config,
        actor=actor,
        algorithm=algorithm,
        workflow=workflow,
        engine=engine,
        rewards=rewards,
        data=data,
        encode=encode,
        io=io,
        dist=dist,
        engine_shares_actor=engine_shares_actor,
        validation=validation,
    )
    start = driver.resume()
    return run(config, driver, io, start, dist=driver.dist, evaluations=evaluations, on_step=on_step)
