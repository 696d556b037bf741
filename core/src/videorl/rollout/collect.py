"""The rollout of a step around any workflow: :func:`collect_groups` gathers the groups a rank trains on,
with dynamic sampling (groups whose rewards are all equal dropped and refilled from the data), from a
:data:`Rollout` — :func:`local_rollout` in this process (encode, then the workflow), or the Ray
controller's calls to its workers."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from videorl.algorithms import formulas as algo
from videorl.parallel import Parallel
from videorl.rollout.workflow import RolloutWorkflow, SampleSource
from videorl.timing import StageTimer

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.config import TrainConfig
    from videorl.data import Sample
    from videorl.encoding import Prompt
    from videorl.episode import Episode
    from videorl.generation import RolloutEngine
    from videorl.rollout.scoring import Scorer


Rollout = Callable[[list["Sample"], int, int], tuple[list[list["Episode"]], dict[str, float]]]
"""``rollout(samples, seed, first_group)``: the scored groups of ``samples`` and the rollout's
counters (:func:`rollout_groups` here; worker calls on the Ray controller)."""


def local_rollout(
    config: TrainConfig,
    workflow: RolloutWorkflow,
    engine: RolloutEngine,
    scorer: Scorer,
    backend: ModelBackend,
    encode: Callable[[Any], Prompt],
    timer: StageTimer,
    baseline: bool = False,
) -> Rollout:
    """A :data:`Rollout` in this process: encode (the ``data`` stage), generate, score (with a greedy
    ``baseline`` response per prompt when the algorithm asks)."""

    def rollout(
        samples: list[Sample], seed: int, first_group: int
    ) -> tuple[list[list[Episode]], dict[str, float]]:
        with timer("data"):
            prompts = [encode(s) for s in samples]
        return workflow.rollout(
            config,
            prompts,
            engine,
            scorer,
            backend,
            seed=seed,
            first_group=first_group,
            timer=timer,
            baseline=baseline,
        )

    return rollout


def sequence_group_rollout(rollout: Rollout, dist: Parallel) -> Rollout:
    """``rollout`` as the ranks of a sequence-parallel group run it (``actor.sequence_parallel_size``):
    the group's first rank rolls out (encode, generate, score) and the others receive its scored
    groups, so they train on the same episodes by construction, whatever the engines, their seeds or
    a sampler's nondeterminism would do. Every rank of the group reads the same samples from its own
    data (the same data rank) and :func:`collect_groups` decides on the same rewards, so their data
    positions stay equal too. Without sequence parallelism, ``rollout`` itself."""
    if dist.sp_size == 1:
        return rollout

    def shared(
        samples: list[Sample], seed: int, first_group: int
    ) -> tuple[list[list[Episode]], dict[str, float]]:
        mine = rollout(samples, seed, first_group) if dist.is_sequence_leader else None
        result: tuple[list[list[Episode]], dict[str, float]] = dist.from_sequence_leader(mine)
        return result

    return shared


def rollout_seed(config: TrainConfig, step: int, attempt: int, rank: int) -> int:
    """The sampling seed of a rank's rollout round (one per step, dynamic-sampling attempt and rank)."""
    return config.seed * 100_003 + step * 1009 + attempt * 17 + rank


def collect_groups(
    config: TrainConfig, step: int, count: int, data: SampleSource, rollout: Rollout, rank: int = 0
) -> tuple[list[list[Episode]], dict[str, float]]:
    """The ``count`` scored groups rank ``rank`` trains on in ``step``, and the counters of the rollout.

    With dynamic sampling, a group whose rewards are all equal (zero advantage) is dropped and the
    batch is refilled with new samples from the data, for at most ``dynamic_sampling_max_tries``
    rounds; after that, dropped groups fill what is still missing (they contribute no gradient).
    ``dynamic_sampling/dropped_groups`` counts the groups dropped.
    """
    cfg = config.algorithm
    kept: list[list[Episode]] = []
    dropped: list[list[Episode]] = []
    extra: dict[str, float] = defaultdict(float)
    for attempt in range(cfg.dynamic_sampling_max_tries if cfg.dynamic_sampling else 1):
        samples = data.take(count - len(kept))
        groups, mix_metrics = rollout(samples, rollout_seed(config, step, attempt, rank), len(kept))
        for key, value in mix_metrics.items():
            extra[key] += value
        if not cfg.dynamic_sampling:
            return groups, dict(extra)
        informative = algo.informative_groups(torch.tensor([[t.reward for t in g] for g in groups])).tolist()
        kept += [g for g, keep in zip(groups, informative) if keep]
        dropped += [g for g, keep in zip(groups, informative) if not keep]
        extra["dynamic_sampling/dropped_groups"] += float(informative.count(False))
        if len(kept) >= count:
            break
    extra["dynamic_sampling/rounds"] = float(attempt + 1)
    filled = kept + dropped[-(count - len(kept)) :] if len(kept) < count else kept
    return filled[:count], dict(extra)
