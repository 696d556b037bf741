"""The step's stages between rollout and update, and its metrics: advantages by the run's estimator,
reward/accuracy/length metrics, greedy validation."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

from videorl.algorithms import StepRewards, advantages_of
from videorl.algorithms import formulas as algo
from videorl.episode import Episode
from videorl.errors import ConfigError
from videorl.rollout import Completion
from videorl.rollout.scoring import Scorer, accuracy_of
from videorl.rollout.single_turn import validation_params

if TYPE_CHECKING:
    from videorl.algorithms import Algorithm
    from videorl.config import TrainConfig
    from videorl.encoding import Prompt
    from videorl.rollout import RolloutEngine


def assign_advantages(
    config: TrainConfig, algorithm: Algorithm, groups: Sequence[Sequence[Episode]]
) -> list[Episode]:
    """Set every trajectory's advantage by the run's estimator (on the rewards with DAPO's overlong
    shaping, when on; an estimator that reads the step also sees the reward's parts and each response's
    trained token count); the trajectories, flattened in group order."""
    cfg = config.algorithm
    rewards = torch.tensor([[t.reward for t in g] for g in groups])
    if cfg.overlong_buffer > 0:
        lengths = torch.tensor([[len(t.response_ids) for t in g] for g in groups])
        rewards = rewards + algo.overlong_penalty(
            lengths, config.rollout.max_response_length, cfg.overlong_buffer, cfg.overlong_penalty
        )
    step = StepRewards(
        rewards,
        torch.tensor([[t.policy_tokens for t in g] for g in groups], dtype=torch.int64),
        tuple(tuple(t.parts for t in g) for g in groups),
    )
    if algorithm.greedy_baseline and not all(g and g[-1].baseline for g in groups):
        raise ConfigError(
            f"algorithm.adv_estimator {cfg.adv_estimator!r} needs a greedy baseline response per prompt, "
            "last in its group, which this rollout did not add: a rollout workflow must call "
            "videorl.rollout.single_turn.add_baselines when the algorithm's greedy_baseline is true"
        )
    advantages = advantages_of(algorithm.estimator, step)
    flat = []
    for g, group in enumerate(groups):
        for j, t in enumerate(group):
            t.advantage = float(advantages[g, j])
            if not t.baseline:
                flat.append(t)
    return flat


def step_metrics(
    trajectories: Sequence[Episode],
    format_key: str = "format",
    canonical: Callable[[str], str] | None = None,
) -> dict[str, float]:
    """Reward, accuracy and format rate (overall and per ``problem_type``, spelled as ``canonical`` —
    the router's ``canonical_type`` — says), the mean of every reward part per type, lengths, offline
    counters."""
    out: dict[str, float] = {}
    by_type: dict[str, list[Episode]] = defaultdict(list)
    online = [t for t in trajectories if not t.offline]
    for t in online:
        kind = t.prompt.sample.problem_type
        by_type[canonical(kind) if canonical is not None else kind].append(t)
    for name, ts in [("overall", online), *sorted(by_type.items())]:
        if ts:
            out[f"reward/{name}"] = sum(t.reward for t in ts) / len(ts)
            out[f"accuracy/{name}"] = sum(accuracy_of(t) for t in ts) / len(ts)
    for name, ts in sorted(by_type.items()):
        for part in sorted({k for t in ts for k in t.parts}):
            values = [t.parts[part] for t in ts if part in t.parts]
            out[f"parts/{name}/{part}"] = sum(values) / len(values)
    formats = [t.parts[format_key] for t in online if format_key in t.parts]
    if formats:
        out["format/overall"] = sum(formats) / len(formats)
    if online:
        lengths = [len(t.response_ids) for t in online]
        out["response_length/mean"] = sum(lengths) / len(lengths)
        out["response_length/clip_ratio"] = sum(t.completion.finish_reason == "length" for t in online) / len(
            online
        )
    offline = [t for t in trajectories if t.offline]
    if offline:
        out["offline/reward"] = sum(t.reward for t in offline) / len(offline)
        out["offline/accuracy"] = sum(accuracy_of(t) for t in offline) / len(offline)
        out["offline/count"] = float(len(offline))
    return out


def evaluate(
    prompts: Sequence[Prompt],
    engine: RolloutEngine,
    scorer: Scorer,
    max_tokens: int,
    canonical: Callable[[str], str] | None = None,
) -> dict[str, float]:
    """Greedy accuracy and reward on held-out prompts (``val/*`` metrics), overall and per problem type.

    ``prompts`` are read once (:class:`~videorl.encoding.EncodedOnRead` encodes them then); their
    encodings are dropped when this returns."""
    prompts = list(prompts)
    outputs = engine.generate([p.require_encoded() for p in prompts], validation_params(max_tokens))
    return validation_metrics(prompts, outputs, scorer, canonical)


def validation_metrics(
    prompts: Sequence[Prompt],
    outputs: Sequence[Sequence[Completion]],
    scorer: Scorer,
    canonical: Callable[[str], str] | None = None,
) -> dict[str, float]:
    """Score the greedy answers ``outputs`` of ``prompts``: the ``val/*`` metrics."""
    answers = [Episode(p, i, group[0]) for i, (p, group) in enumerate(zip(prompts, outputs))]
    scorer(answers)
    metrics = step_metrics(answers, canonical=canonical)
    return {f"val/{k}": v for k, v in metrics.items() if k.startswith(("reward/", "accuracy/", "format/"))}
