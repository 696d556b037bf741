"""The actor's half of a training step, written once for the one-process / torchrun driver
(:class:`videorl.train.local.LocalStep`) and the Ray actor worker (:class:`videorl.cluster.worker.Worker`):

1. the engine asleep (an engine that can free its device memory for the update and the check);
2. the first-step parity gate (``rollout.parity_check``), before any parameter changes;
3. the learning rate of the step (warm-up);
4. the update (:func:`videorl.actor.update.update`);
5. the engine's refresh with the new weights (the weight sync).

The parity gate compares the log-probs the engine already returned with the actor's forward, so it
needs no engine awake: run after the engine sleeps, its forward does not meet the engine's weights
and KV cache on the GPU (after a resume, with Adam's states loaded besides).

Sequence parallelism plugs in below, in the actor's forward; above, the torchrun driver gives the
ranks of a group their first rank's episodes (:func:`videorl.rollout.collect.sequence_group_rollout`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from videorl.actor.parity import first_step_check
from videorl.actor.policy import refresh_engine, set_learning_rate, sleep_engine
from videorl.actor.update import update

if TYPE_CHECKING:
    from videorl.actor.policy import Actor
    from videorl.algorithms import Algorithm
    from videorl.config import TrainConfig
    from videorl.episode import Episode
    from videorl.generation import RolloutEngine
    from videorl.parallel import Parallel
    from videorl.timing import StageTimer


def train_step(
    config: TrainConfig,
    actor: Actor,
    algorithm: Algorithm,
    episodes: Sequence[Episode],
    dist: Parallel,
    timer: StageTimer,
    *,
    step: int,
    engine: RolloutEngine | None = None,
    parity_check: bool = False,
) -> dict[str, float]:
    """Update ``actor`` on this rank's scored ``episodes`` of ``step`` (a collective under FSDP); its
    metrics. ``engine``: the rank's engine when it holds a copy of the weights to refresh (None: no
    engine here, or one that generates with the actor's own module). ``parity_check``: compare the
    engine's log-probs of ``episodes`` with the actor's first (the run's first step on this process)."""
    metrics: dict[str, float] = {}
    if engine is not None:
        sleep_engine(engine)
    if parity_check:
        with timer("parity_check"):
            metrics.update(first_step_check(config, actor, episodes, dist))
    set_learning_rate(actor.optimizer, config, step)
    with timer("actor"):
        metrics = {**update(config, actor, algorithm, episodes, dist, timer), **metrics}
    if engine is not None:
        with timer("weight_sync"):
            refresh_engine(actor, engine)
    return metrics
