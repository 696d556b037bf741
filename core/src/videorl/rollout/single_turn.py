"""SINGLE"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from videorl import algorithms
from videorl.algorithms import formulas as algo
from videorl.alignment import check_response_tokens
from videorl.episode import Episode
from videorl.rollout import Completion, SamplingParams
from videorl.rollout.scoring import Scorer, accuracy_of
from videorl.timing import StageTimer

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.config import TrainConfig
    from videorl.data import Sample
    from videorl.encoding import Prompt
    from videorl.rollout import RolloutEngine
    from videorl.train.data import TrainData


def sampling_params(config: TrainConfig, *, seed: int | None) -> SamplingParams:
    r = config.rollout
    return SamplingParams(
        n=r.n,
        temperature=r.temperature,
        top_p=r.top_p,
        top_k=max(r.top_k, 0),
        max_tokens=r.max_response_length,
        seed=seed,
    )


def validation_params(max_tokens: int) -> SamplingParams:
    return SamplingParams(n=1, temperature=0, max_tokens=max_tokens)


def offline_completion(backend: ModelBackend, text: str, max_tokens: int) -> Completion:
    """The tokens of an offline trajectory, ended with the backend's end-of-turn token and truncated to
    the response limit. Its log-probs are unknown (NaN): the update recomputes them."""
    ids = [*backend.processor.tokenizer.encode(text, add_special_tokens=False), backend.end_of_turn_id()]
    reason = "stop"
    if len(ids) > max_tokens:
        ids, reason = ids[:max_tokens], "length"
    return Completion(ids, [math.nan] * len(ids), reason)


def rollout_groups(
    config: TrainConfig,
    prompts: Sequence[Prompt],
    engine: RolloutEngine,
    scorer: Scorer,
    backend: ModelBackend,
    *,
    seed: int | None,
    first_group: int = 0,
    timer: StageTimer | None = None,
) -> tuple[list[list[Episode]], dict[str, float]]:
    """Generate the groups of ``prompts`` with ``engine``, then :func:`finish_groups`.

    ``timer`` receives the generation time as ``rollout`` and the scoring time as ``reward``.
    """
    timer = timer or StageTimer()
    with timer("rollout", f"{len(prompts)} prompts × {config.rollout.n}"):
        outputs = engine.generate([p.require_encoded() for p in prompts], sampling_params(config, seed=seed))
    groups, metrics = finish_groups(
        config, prompts, outputs, scorer, backend, first_group=first_group, timer=timer
    )
    if wants_greedy_baseline(config):
        with timer("rollout", f"{len(prompts)} greedy baselines"):
            greedy = engine.generate(
                [p.require_encoded() for p in prompts], validation_params(config.rollout.max_response_length)
            )
        add_baselines(config, groups, [g[0] for g in greedy], scorer, backend, timer)
    return groups, metrics


def wants_greedy_baseline(config: TrainConfig) -> bool:
    """Whether the run's estimator asks the rollout layer for one greedy response per prompt (its class
    says ``greedy_baseline = True``, e.g. ReMax), added by :func:`add_baselines`."""
    return bool(getattr(algorithms.build(config.algorithm).estimator, "greedy_baseline", False))


def add_baselines(
    config: TrainConfig,
    groups: Sequence[list[Episode]],
    completions: Sequence[Completion],
    scorer: Scorer,
    backend: ModelBackend,
    timer: StageTimer,
) -> None:
    """Score one extra response per group (an estimator's baseline, e.g. ReMax's greedy one) and append it
    to its group, marked ``baseline``: the estimator sees its reward, the update never trains on it."""
    forbidden = backend.forbidden_token_ids() | set(config.model.suppress_token_ids)
    extra = []
    for group, completion in zip(groups, completions, strict=True):
        check_response_tokens(group[0].prompt.sample.id, completion.token_ids, forbidden)
        extra.append(Episode(group[0].prompt, group[0].group, completion, baseline=True))
    with timer("reward"):
        scorer(extra)
    for group, t in zip(groups, extra):
        group.append(t)


def finish_groups(
    config: TrainConfig,
    prompts: Sequence[Prompt],
    outputs: Sequence[Sequence[Completion]],
    scorer: Scorer,
    backend: ModelBackend,
    *,
    first_group: int = 0,
    timer: StageTimer | None = None,
) -> tuple[list[list[Episode]], dict[str, float]]:
    """Check the generated responses (``outputs[i]`` are the completions of ``prompts[i]``), score
    them, and mix in offline trajectories when mix-policy is on."""
    timer = timer or StageTimer()
    forbidden = backend.forbidden_token_ids() | set(config.model.suppress_token_ids)
    groups = []
    for g, (prompt, completions) in enumerate(zip(prompts, outputs)):
        for c in completions:
            check_response_tokens(prompt.sample.id, c.token_ids, forbidden)
        groups.append([Episode(prompt, first_group + g, c) for c in completions])
    flat = [t for group in groups for t in group]
    with timer("reward"):
        scorer(flat)
    metrics: dict[str, float] = {}
    if config.rollout.enable_mix_policy:
        decision = algo.mix_policy_decision(
            [p.sample.has_offline_trajectory for p in prompts],
            [[accuracy_of(t) for t in group] for group in groups],
            config.rollout.mix_policy_accuracy_threshold,
        )
        replaced = []
        for group, replace in zip(groups, decision.replace):
            if replace:
                last = group[-1]
                text = last.prompt.sample.offline_output or ""
                completion = offline_completion(backend, text, config.rollout.max_response_length)
                group[-1] = Episode(last.prompt, last.group, completion, offline=True)
                replaced.append(group[-1])
        with timer("reward"):
            scorer(replaced)
        metrics.update(decision.metrics())
    return groups, metrics


Rollout = Callable[[list["Sample"], int, int], tuple[list[list[Episode]], dict[str, float]]]
"""``rollout(samples, seed, first_group)``: the scored groups of ``samples`` and the rollout's
counters (:func:`rollout_groups` here; worker calls on the Ray controller)."""


def local_rollout(
    config: TrainConfig,
    engine: RolloutEngine,
    scorer: Scorer,
    backend: ModelBackend,
    encode: Callable[[Any], Prompt],
    timer: StageTimer,
) -> Rollout:
    """A :data:`Rollout` in this process: encode (the ``data`` stage), generate, score."""

    def rollout(
        samples: list[Sample], seed: int, first_group: int
    ) -> tuple[list[list[Episode]], dict[str, float]]:
        with timer("data"):
            prompts = [encode(s) for s in samples]
        return rollout_groups(
            config, prompts, engine, scorer, backend, seed=seed, first_group=first_group, timer=timer
        )

    return rollout


def rollout_seed(config: TrainConfig, step: int, attempt: int, rank: int) -> int:
    """The sampling seed of a rank's rollout round (one per step, dynamic-sampling attempt and rank)."""
    return config.seed * 100_003 + step * 1009 + attempt * 17 + rank


def collect_groups(
    config: TrainConfig, step: int, count: int, data: TrainData, rollout: Rollout, rank: int = 0
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
