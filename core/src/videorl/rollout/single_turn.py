"""The single-turn rollout workflow (``rollout.workflow: single_turn``, the default): each prompt's ``n``
responses are sampled in one engine call, checked for forbidden tokens, scored, and with mix-policy the
last slot of a group may take the sample's offline trajectory; an estimator that asks for a greedy
baseline (ReMax) gets one more response per prompt, scored and never trained on. Each response is an
:class:`~videorl.episode.Episode` of one segment."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from videorl.algorithms import formulas as algo
from videorl.alignment import check_response_tokens
from videorl.episode import Episode
from videorl.rollout import Completion, SamplingParams
from videorl.rollout.scoring import Scorer, accuracy_of
from videorl.timing import StageTimer

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.config import TrainConfig
    from videorl.encoding import Prompt
    from videorl.rollout import RolloutEngine


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
    baseline: bool = False,
) -> tuple[list[list[Episode]], dict[str, float]]:
    """Generate the groups of ``prompts`` with ``engine``, then :func:`finish_groups`; with ``baseline``
    (the algorithm's ``greedy_baseline``) also one greedy response per prompt (:func:`add_baselines`).

    ``timer`` receives the generation time as ``rollout`` and the scoring time as ``reward``.
    """
    timer = timer or StageTimer()
    with timer("rollout", f"{len(prompts)} prompts × {config.rollout.n}"):
        outputs = engine.generate([p.require_encoded() for p in prompts], sampling_params(config, seed=seed))
    groups, metrics = finish_groups(
        config, prompts, outputs, scorer, backend, first_group=first_group, timer=timer
    )
    if baseline:
        with timer("rollout", f"{len(prompts)} greedy baselines"):
            greedy = engine.generate(
                [p.require_encoded() for p in prompts], validation_params(config.rollout.max_response_length)
            )
        add_baselines(config, groups, [g[0] for g in greedy], scorer, backend, timer)
    return groups, metrics


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


class SingleTurn:
    """The :class:`~videorl.rollout.workflow.RolloutWorkflow` of one response per episode."""

    name = "single_turn"

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
        """:func:`rollout_groups`."""
        return rollout_groups(
            config, prompts, engine, scorer, backend, seed=seed, first_group=first_group, timer=timer,
            baseline=baseline,
        )  # fmt: skip
