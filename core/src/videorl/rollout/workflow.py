r"""Rollout workflows: how the prompts of a step become scored groups of episodes.

A :class:`RolloutWorkflow` (a plugin kind, ``register_rollout_workflows``; chosen by
``rollout.workflow``) receives a batch of encoded prompts, the rank's engine and the scorer, and returns
one group of :class:`~videorl.episode.Episode`\ s per prompt with the rollout's counters. The built-in
``single_turn`` (:class:`videorl.rollout.single_turn.SingleTurn`) samples ``n`` responses per prompt; a
multi-turn workflow generates, runs a tool, appends the observation as a segment the update does not
train on, and generates again. Around any workflow, :func:`collect_groups` does dynamic sampling
(drop groups whose rewards are all equal and refill from the data) and :func:`local_rollout` encodes
the samples in this process first. The composition root builds the workflow once, by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from videorl.timing import StageTimer

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.config import TrainConfig
    from videorl.data import Sample
    from videorl.encoding import Prompt
    from videorl.episode import Episode
    from videorl.generation import RolloutEngine
    from videorl.rollout.scoring import Scorer


@runtime_checkable
class RolloutWorkflow(Protocol):
    """Turns prompts into scored groups of episodes (one group per prompt, in prompt order)."""

    def rollout(
        self,
        config: TrainConfig,
        prompts: Sequence[Prompt],
        engine: RolloutEngine,
        scorer: Scorer,
        backend: ModelBackend,
        *,
        seed: int | None,
        first_group: int = 0,
        timer: StageTimer | None = None,
        baseline: bool = False,
    ) -> tuple[list[list[Episode]], dict[str, float]]:
        """The groups of ``prompts`` (``config.rollout.n`` episodes each, group ids from
        ``first_group``), scored by ``scorer``, and the rollout's counters; sampled with ``seed``;
        ``timer`` receives the stages (``rollout``, ``reward``); with ``baseline`` one more greedy
        episode per group, last and marked ``baseline`` (the algorithm asks: ReMax)."""
        ...


class SampleSource(Protocol):
    """Where the next samples of a rank come from (:class:`videorl.train.data.TrainData`)."""

    def take(self, k: int) -> list[Sample]: ...
