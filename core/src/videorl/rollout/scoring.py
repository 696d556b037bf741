"""Scoring episodes with the run's rewards, in this process or on reward workers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from videorl.episode import Episode
from videorl.rewards.types import RewardInput

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.rewards.router import RewardRouter


Scorer = Callable[[Sequence["Episode"]], None]
"""Scores trajectories in place (``reward`` and ``parts``): in this process, or on reward workers."""


def local_scorer(rewards: RewardRouter, backend: ModelBackend) -> Scorer:
    """A :data:`Scorer` that decodes with ``backend``'s tokenizer and routes to ``rewards`` here."""
    tokenizer = backend.processor.tokenizer
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    return lambda trajectories: score(rewards, trajectories, decode, backend.family)


def score(
    rewards: RewardRouter, trajectories: Sequence[Episode], decode: Callable[[list[int]], str], family: str
) -> None:
    """Route every response (an episode's last turn, with the tool calls it made) to its reward; store
    the score plus the trajectory components the reward config weights
    (:meth:`~videorl.rewards.config.RewardConfig.episode_parts`) and all the parts on the trajectory."""
    inputs = []
    for t in trajectories:
        sample = t.prompt.sample
        response = decode(t.completion.token_ids)
        inputs.append(
            RewardInput.from_sample(
                sample, response, media=t.prompt.media, model_family=family, tool_calls=t.tool_calls
            )
        )
    for t, out in zip(trajectories, rewards.score(inputs)):
        components = rewards.config.episode_parts(t.tool_calls)
        t.reward = (out.score if out is not None else 0.0) + sum(components.values())
        t.parts = {**(out.parts if out is not None else {}), **components}


def accuracy_of(t: Episode) -> float:
    """The accuracy part of a response's reward (its whole reward when the reward has no such part)."""
    return float(t.parts.get("accuracy", t.reward))
