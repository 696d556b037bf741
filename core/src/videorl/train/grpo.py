"""The training step: rollout, reward, advantages, the policy update, weight sync — and its one-process
driver.

It receives plain, already-built objects (the actor, the rollout engine, the reward router, the data
and the run's writers) and knows nothing of plugins or config files; ``videorl train`` composes
them (``videorl.train.compose``) and :func:`videorl.train.loop.run` repeats the step. One step, for
the prompts of this rank:

1. data      take the next samples and encode them once (frames from the cache, one tokenisation);
2. rollout   ``n`` responses per prompt; mix-policy may put the sample's offline trajectory in the
             last slot of its group;
3. reward    route each response to its ``problem_type``'s reward;
4. advantage the run's estimator (:mod:`videorl.algorithms`; GRPO by default) on the rewards (dynamic
             sampling first drops groups with equal rewards);
5. update    teacher-forced forward on the same prompt ids and grids (packed into one row per
             micro-batch with ``actor.padding_free``), the run's policy loss (PPO with DAPO's
             clip-higher by default) over micro-batches by a token budget, one optimizer step per
             mini-batch;
6. sync      refresh the engine's weights.

:class:`LocalStep` is the loop's driver for one process or one torchrun rank: under FSDP every rank
runs it on its share of the prompts; token counts and micro-batch counts are agreed between ranks so
that every rank runs the same collectives. On Ray, :mod:`videorl.cluster.controller` drives the same
pieces (``collect_groups``, ``finish_groups``, ``assign_advantages``, ``update``) across worker
processes.
"""

from __future__ import annotations

import inspect
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from videorl import algorithms
from videorl.alignment import check_response_tokens
from videorl.errors import ConfigError
from videorl.model_inputs import response_stats
from videorl.packing import pack_for_backend
from videorl.parity import first_step_check, modality_gaps
from videorl.rewards.types import RewardInput
from videorl.rollout import Completion, SamplingParams
from videorl.train import algo
from videorl.train.checkpoint import resume, save_checkpoint
from videorl.train.distributed import Dist

if TYPE_CHECKING:
    from torch.distributed.checkpoint.stateful import Stateful

    from videorl.backend import ModelBackend
    from videorl.config import AlgorithmConfig, TrainConfig
    from videorl.data import Sample
    from videorl.rewards.router import RewardRouter
    from videorl.rollout import RolloutEngine
    from videorl.train.checkpoint import CheckpointManager
    from videorl.train.data import Prompt, TrainData
    from videorl.train.loop import OnStep, PeriodicEvaluation
    from videorl.train.lora import Adapters
    from videorl.train.metrics import CompletionLog, MetricsWriter, ProgressBar


# --- what the loop receives -----------------------------------------------------------------------


@dataclass
class Actor:
    """The policy being trained (possibly FSDP-wrapped), its optimizer, and the backend of its family."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    backend: ModelBackend
    reference: torch.nn.Module | None = None  # frozen copy, only when the KL penalty is on
    compute_dtype: torch.dtype | None = (
        None  # autocast dtype of the forward (float32 masters); None: as stored
    )
    full_state_dict: Callable[[torch.dtype | None], dict[str, torch.Tensor]] | None = (
        None  # gathers FSDP shards
    )
    lora: Adapters | None = None  # actor.lora: only these train, and they are all a checkpoint holds

    def weights(self, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """The policy's full weights under the base model's names, for a rollout engine: with LoRA the
        adapters merged into the base weights (a copy; the module keeps them apart)."""
        if self.lora is not None:
            return self.lora.merged(self._full_state(None), dtype)
        return self._full_state(dtype)

    def _full_state(self, dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
        if self.full_state_dict is not None:
            return self.full_state_dict(dtype)
        return _cast(self.model.state_dict(), dtype)

    def checkpoint_state(self) -> Stateful:
        """What a checkpoint saves and a resume loads (:func:`videorl.train.checkpoint.save_checkpoint`):
        the model and its optimizer, or with LoRA the adapters and their optimizer states alone."""
        from videorl.train.checkpoint import ActorState

        if self.lora is not None:
            from videorl.train.lora import AdapterState

            return AdapterState(self.lora, self.optimizer)
        return ActorState(self.model, self.optimizer)

    def reference_policy(self) -> AbstractContextManager[torch.nn.Module | None]:
        """The reference policy of the KL term while in the ``with``: the frozen copy, or with LoRA this
        module with its adapters off; None when there is neither (reference workers compute it)."""
        return self.lora.disabled() if self.lora is not None else nullcontext(self.reference)


def _cast(state: dict[str, torch.Tensor], dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
    if dtype is None:
        return state
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}


def refresh_state(actor: Actor, engine: RolloutEngine) -> dict[str, torch.Tensor]:
    """The actor's weights for ``engine``'s refresh, in the dtype it runs in when it says
    (``weights_dtype``: a bf16 vLLM engine needs half the host memory and /dev/shm of float32), and in
    the Hub checkpoints' names and layout (:func:`~videorl.backend.hub_checkpoint_layout`), which vLLM's
    loaders expect, except for the hf engine, which loads them into a transformers model."""
    from videorl.backend import hub_checkpoint_layout
    from videorl.rollout.hf import HFEngine

    state = actor.weights(getattr(engine, "weights_dtype", None))
    if isinstance(getattr(engine, "engine", engine), HFEngine):  # alone or a tensor-parallel group's
        return state
    return hub_checkpoint_layout(actor.backend, state)


@dataclass
class RunIO:
    """Where the loop writes: checkpoints, metrics, a progress bar (rank 0 only writes)."""

    checkpoints: CheckpointManager
    metrics: MetricsWriter | None = None
    progress: ProgressBar | None = None
    completions: CompletionLog | None = None  # trainer.log_completions


@dataclass
class Trajectory:
    """One response of a group, with everything the update and the metrics need."""

    prompt: Prompt
    group: int
    completion: Completion
    offline: bool = False
    baseline: bool = False  # an estimator's extra response (ReMax's greedy one): scored, never trained on
    reward: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)
    advantage: float = 0.0
    ref_logprobs: list[float] | None = None  # from reference workers (Ray, split placement)
    version: int = 0  # the policy version (step of its last update) that generated it (Ray)


# --- small helpers --------------------------------------------------------------------------------


class StageTimer:
    """Wall time per stage of a step (``time/<stage>`` metrics); ``show`` (e.g. the progress bar's
    :meth:`~videorl.train.metrics.ProgressBar.stage`) is told what the step is doing as it goes, so a
    long step shows progress inside it."""

    def __init__(self, show: Callable[[str], None] | None = None) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.show: Callable[[str], None] = show or (lambda _: None)

    @contextmanager
    def __call__(self, stage: str, detail: str = "") -> Iterator[None]:
        self.show(f"{stage} {detail}".strip())
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] += time.perf_counter() - start


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


def offline_completion(backend: ModelBackend, text: str, max_tokens: int) -> Completion:
    """The tokens of an offline trajectory, ended with the backend's end-of-turn token and truncated to
    the response limit. Its log-probs are unknown (NaN): the update recomputes them."""
    ids = [*backend.processor.tokenizer.encode(text, add_special_tokens=False), backend.end_of_turn_id()]
    reason = "stop"
    if len(ids) > max_tokens:
        ids, reason = ids[:max_tokens], "length"
    return Completion(ids, [math.nan] * len(ids), reason)


Scorer = Callable[[Sequence["Trajectory"]], None]
"""Scores trajectories in place (``reward`` and ``parts``): in this process, or on reward workers."""


def local_scorer(rewards: RewardRouter, backend: ModelBackend) -> Scorer:
    """A :data:`Scorer` that decodes with ``backend``'s tokenizer and routes to ``rewards`` here."""
    tokenizer = backend.processor.tokenizer
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    return lambda trajectories: score(rewards, trajectories, decode, backend.family)


def score(
    rewards: RewardRouter, trajectories: Sequence[Trajectory], decode: Callable[[list[int]], str], family: str
) -> None:
    """Route every response to its reward; store the score and its parts on the trajectory."""
    inputs = []
    for t in trajectories:
        sample = t.prompt.sample
        response = decode(t.completion.token_ids)
        inputs.append(RewardInput.from_sample(sample, response, media=t.prompt.media, model_family=family))
    for t, out in zip(trajectories, rewards.score(inputs)):
        t.reward = out.score if out is not None else 0.0
        t.parts = dict(out.parts) if out is not None else {}


def accuracy_of(t: Trajectory) -> float:
    """The accuracy part of a response's reward (its whole reward when the reward has no such part)."""
    return float(t.parts.get("accuracy", t.reward))


# --- the step -------------------------------------------------------------------------------------


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
) -> tuple[list[list[Trajectory]], dict[str, float]]:
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
    groups: Sequence[list[Trajectory]],
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
        extra.append(Trajectory(group[0].prompt, group[0].group, completion, baseline=True))
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
) -> tuple[list[list[Trajectory]], dict[str, float]]:
    """Check the generated responses (``outputs[i]`` are the completions of ``prompts[i]``), score
    them, and mix in offline trajectories when mix-policy is on."""
    timer = timer or StageTimer()
    forbidden = backend.forbidden_token_ids() | set(config.model.suppress_token_ids)
    groups = []
    for g, (prompt, completions) in enumerate(zip(prompts, outputs)):
        for c in completions:
            check_response_tokens(prompt.sample.id, c.token_ids, forbidden)
        groups.append([Trajectory(prompt, first_group + g, c) for c in completions])
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
                group[-1] = Trajectory(last.prompt, last.group, completion, offline=True)
                replaced.append(group[-1])
        with timer("reward"):
            scorer(replaced)
        metrics.update(decision.metrics())
    return groups, metrics


def micro_batches(trajectories: Sequence[Trajectory], budget: int, dist: Dist) -> list[list[Trajectory]]:
    """Pack by token budget; every rank runs as many micro-batches as the rank that needs the most."""
    lengths = [len(t.prompt.require_encoded()) + len(t.completion.token_ids) for t in trajectories]
    count = len(algo.pack_by_token_budget(lengths, budget))
    count = int(dist.all_reduce(torch.tensor(count), op="max"))
    return [
        [trajectories[i] for i in b]
        for b in algo.pack_by_token_budget(lengths, budget, min_micro_batches=count)
    ]


def forward_responses(
    model: torch.nn.Module,
    backend: ModelBackend,
    batch: Sequence[Trajectory],
    forbidden: Sequence[int],
    compute_dtype: torch.dtype | None = None,
    entropy_grad: bool = False,
    padding_free: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token log-probs and entropies of the responses of ``batch`` (teacher-forced), and their mask.

    With ``compute_dtype`` the forward runs under autocast in it (float32 master weights). The LM
    head runs on the response's positions only (``logits_to_keep``: a 21k-token video prompt's logits
    would be 6.4 GB in bf16 at a 152k vocabulary, and are never used); log-softmax and entropy run in
    chunks (:func:`~videorl.model_inputs.response_stats`), the entropy with a graph only when
    ``entropy_grad`` (its coefficient is not 0). ``padding_free`` (``actor.padding_free``): the
    sequences run packed in one row (:mod:`videorl.packing`) when the backend can pack them; the
    results keep the padded ``B×R`` layout either way."""
    param = next(model.parameters())
    inputs = backend.collate(
        [t.prompt.require_encoded() for t in batch], [t.completion.token_ids for t in batch]
    )
    inputs = inputs.to(device=param.device, dtype=param.dtype)
    packed = pack_for_backend(backend, inputs) if padding_free else None
    mixed = compute_dtype is not None and compute_dtype != param.dtype
    kwargs = packed.model_kwargs() if packed is not None else inputs.model_kwargs()
    accepted = inspect.signature(model.forward).parameters
    if "logits_to_keep" in accepted:
        kwargs["logits_to_keep"] = packed.logits_index if packed is not None else inputs.logits_to_keep
    if (
        "use_cache" in accepted
    ):  # a teacher-forced forward never decodes on: no KV cache (1.2 GB per 21k-token row at 7B)
        kwargs["use_cache"] = False
    with torch.autocast(param.device.type, dtype=compute_dtype, enabled=mixed):
        logits = model(**kwargs).logits
    if packed is not None:
        logp, entropy = packed.response_stats(logits, forbidden=forbidden, entropy_grad=entropy_grad)
    else:
        logp, entropy = response_stats(logits, inputs, forbidden=forbidden, entropy_grad=entropy_grad)
    assert inputs.response_mask is not None
    return logp, entropy, inputs.response_mask.to(logp.device)


def _rows(rows: Sequence[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """Per-response rows (each as long as its response) padded into a tensor shaped as ``like``."""
    out = torch.zeros_like(like)
    for i, row in enumerate(rows):
        out[i, : row.shape[0]] = row.to(out.device, out.dtype)
    return out


def update(
    config: TrainConfig, actor: Actor, trajectories: Sequence[Trajectory], dist: Dist, timer: StageTimer
) -> dict[str, float]:
    """The actor update of one step: ``rollout_batch_size / global_batch_size`` optimizer steps.

    With a single optimizer step the old policy is the current one, so the ratio's denominator is
    the detached log-prob of the same forward; with several, the old log-probs are computed first,
    before any parameter changes.

    Each micro-batch's loss is divided by the token (or response) count of the whole mini-batch over
    all ranks, times the world size: FSDP averages the ranks' gradients, so the step follows the
    gradient of the mini-batch's token-mean loss however it is split into micro-batches and ranks.
    """
    cfg = config.algorithm
    policy_loss = algorithms.build(cfg).loss
    forbidden = sorted(actor.backend.forbidden_token_ids() | set(config.model.suppress_token_ids))
    n = config.rollout.n
    groups = [list(trajectories[i : i + n]) for i in range(0, len(trajectories), n)]
    updates = max(1, min(len(groups), config.data.rollout_batch_size // config.actor.global_batch_size))
    per_update = math.ceil(len(groups) / updates)
    minis = [[t for g in groups[u * per_update : (u + 1) * per_update] for t in g] for u in range(updates)]
    budget, packed = config.actor.max_tokens_per_micro_batch, config.actor.padding_free
    old: dict[int, torch.Tensor] = {}
    if updates > 1:
        with timer("old_logprob"), torch.no_grad():
            for batch in micro_batches(trajectories, budget, dist):
                logp, _, _ = forward_responses(
                    actor.model, actor.backend, batch, forbidden, actor.compute_dtype, padding_free=packed
                )
                old.update({id(t): logp[row, : len(t.completion.token_ids)] for row, t in enumerate(batch)})
    # Before the micro-batch loop, not between an actor forward and its backward (where its
    # activations would sit on top of the actor's).
    ref: dict[int, torch.Tensor] = (
        _reference_rows(actor, trajectories, forbidden, config, dist, timer) if cfg.use_kl_loss else {}
    )
    sums: dict[str, float] = defaultdict(float)
    actor.model.train()
    for u, mini in enumerate(minis, start=1):
        trained = [t for t in mini if _trained(cfg, t)]
        counts = torch.tensor([float(sum(len(t.completion.token_ids) for t in trained)), float(len(trained))])
        tokens, responses = (max(float(c), 1.0) / dist.world_size for c in dist.all_reduce(counts))
        batches = micro_batches(mini, budget, dist)
        for j, batch in enumerate(batches, start=1):
            timer.show(f"update {u}/{updates}, micro-batch {j}/{len(batches)}")
            logp, entropy, mask = forward_responses(
                actor.model,
                actor.backend,
                batch,
                forbidden,
                actor.compute_dtype,
                entropy_grad=cfg.entropy_coef > 0,
                padding_free=packed,
            )
            if cfg.overlong_filtering:
                keep = torch.tensor([_trained(cfg, t) for t in batch], device=mask.device)
                mask = mask * keep.to(mask.dtype).unsqueeze(-1)
            old_logp = _rows([old[id(t)] for t in batch], logp) if old else logp.detach()
            adv = torch.tensor([t.advantage for t in batch], dtype=torch.float32, device=logp.device)
            if cfg.rollout_correction != "none":
                adv = adv.unsqueeze(-1) * _rollout_correction(cfg, batch, old_logp, mask, sums)
            scale = algorithms.LossScale(tokens, responses, config.rollout.max_response_length)
            pl = policy_loss.loss(logp, old_logp, adv, mask, scale)
            loss, valid = pl.loss, mask.float()
            if cfg.entropy_coef > 0:
                loss = loss - cfg.entropy_coef * (entropy * valid).sum() / tokens
            if cfg.use_kl_loss:
                kl = algo.kl_k3(logp, _rows([ref[id(t)] for t in batch], logp))
                loss = loss + cfg.kl_coef * (kl * valid).sum() / tokens
                sums["actor/kl"] += float((kl.detach() * valid).sum())
            loss.backward()
            sums["actor/loss"] += float(pl.loss.detach())
            sums["actor/clip_fraction"] += float(pl.clip_fraction) * float(valid.sum())
            sums["actor/entropy"] += float((entropy.detach() * valid).sum())
            sums["tokens"] += float(valid.sum())
            for kind, gap in modality_gaps(batch, logp).items():  # |actor - engine| per modality
                sums[f"gap/{kind}"] += gap.total
                sums[f"gap_tokens/{kind}"] += gap.count
                sums["gap"] += gap.total
                sums["gap_tokens"] += gap.count
        sums["actor/grad_norm"] += _clip_and_step(actor, config.optim.grad_clip) / updates
    tokens_all = max(sums["tokens"], 1.0)
    out = {
        "actor/loss": sums["actor/loss"] / updates,
        "actor/clip_fraction": sums["actor/clip_fraction"] / tokens_all,
        "actor/entropy": sums["actor/entropy"] / tokens_all,
        "actor/grad_norm": sums["actor/grad_norm"],
        "actor/lr": float(actor.optimizer.param_groups[0]["lr"]),
        "actor/updates": float(updates),
        "tokens/step": float(
            sum(len(t.prompt.require_encoded()) + len(t.completion.token_ids) for t in trajectories)
        ),
    }
    if cfg.use_kl_loss:
        out["actor/kl"] = sums["actor/kl"] / tokens_all
    if sums["gap_tokens"]:
        out["rollout/logprob_diff"] = sums["gap"] / sums["gap_tokens"]
    for kind in ("video", "image", "text"):
        if sums[f"gap_tokens/{kind}"]:
            out[f"rollout/logprob_diff/{kind}"] = sums[f"gap/{kind}"] / sums[f"gap_tokens/{kind}"]
    if cfg.rollout_correction != "none":
        changed = "truncated_fraction" if cfg.rollout_correction == "tis" else "masked_fraction"
        for kind in ("", "/video", "/image", "/text"):
            if sums[f"rc_tokens{kind}"]:
                out[f"rollout_correction/weight_mean{kind}"] = (
                    sums[f"rc_weight{kind}"] / sums[f"rc_tokens{kind}"]
                )
                out[f"rollout_correction/{changed}{kind}"] = (
                    sums[f"rc_changed{kind}"] / sums[f"rc_tokens{kind}"]
                )
    return out


def _rollout_correction(
    cfg: AlgorithmConfig,
    batch: Sequence[Trajectory],
    old_logp: torch.Tensor,
    mask: torch.Tensor,
    sums: dict[str, float],
) -> torch.Tensor:
    """The TIS / MIS weights of ``batch``'s tokens (``π_old / π_rollout``, the engine's log-probs being
    the rollout's), counted into ``sums`` overall and per modality of the prompts."""
    rollout = _rows([torch.tensor(t.completion.logprobs, dtype=torch.float32) for t in batch], old_logp)
    correction = algo.rollout_correction(
        old_logp, rollout, mask, mode=cfg.rollout_correction,  # type: ignore[arg-type]
        level=cfg.rollout_correction_level, cap=cfg.rollout_correction_cap,
    )  # fmt: skip
    valid = mask.to(torch.float32)
    for row, t in enumerate(batch):
        kind = t.prompt.require_encoded().prompt.data_type
        for key in ("", f"/{kind}"):
            sums[f"rc_weight{key}"] += float((correction.weights[row] * valid[row]).sum())
            sums[f"rc_changed{key}"] += float(correction.changed[row].sum())
            sums[f"rc_tokens{key}"] += float(valid[row].sum())
    return correction.weights


def _trained(cfg: AlgorithmConfig, t: Trajectory) -> bool:
    """Whether the update trains on ``t``: DAPO's overlong filtering leaves truncated responses out."""
    return not (cfg.overlong_filtering and t.completion.finish_reason == "length")


def _reference_rows(
    actor: Actor,
    trajectories: Sequence[Trajectory],
    forbidden: Sequence[int],
    config: TrainConfig,
    dist: Dist,
    timer: StageTimer,
) -> dict[int, torch.Tensor]:
    """The reference model's per-token log-probs of each response (keyed by ``id`` of the trajectory,
    each row as long as its response): computed here by the actor's reference policy (its frozen copy,
    or with LoRA the actor with its adapters off), packed as the update packs (its forward is a collective
    under FSDP), or taken from the trajectories (computed by reference workers)."""
    out: dict[int, torch.Tensor] = {}
    with actor.reference_policy() as reference:
        if reference is not None:
            with timer("reference"), torch.no_grad():
                for batch in micro_batches(trajectories, config.actor.max_tokens_per_micro_batch, dist):
                    logp = forward_responses(
                        reference, actor.backend, batch, forbidden, padding_free=config.actor.padding_free
                    )[0]
                    out.update(
                        {id(t): logp[row, : len(t.completion.token_ids)] for row, t in enumerate(batch)}
                    )
            return out
    for t in trajectories:
        if t.ref_logprobs is None:
            raise RuntimeError(
                f"sample {t.prompt.sample.id!r}: algorithm.use_kl_loss is on but neither a reference model "
                "nor reference log-probs are available"
            )
        out[id(t)] = torch.tensor(t.ref_logprobs, dtype=torch.float32)
    return out


def reference_logprobs(
    reference: torch.nn.Module, backend: ModelBackend, trajectories: Sequence[Trajectory], config: TrainConfig
) -> list[list[float]]:
    """Per-token log-probs of each response under ``reference`` (a reference worker's whole job),
    packed into micro-batches by ``actor.max_tokens_per_micro_batch`` as the update packs them."""
    forbidden = sorted(backend.forbidden_token_ids() | set(config.model.suppress_token_ids))
    out: dict[int, list[float]] = {}
    with torch.no_grad():
        for batch in micro_batches(trajectories, config.actor.max_tokens_per_micro_batch, Dist()):
            logp = forward_responses(
                reference, backend, batch, forbidden, padding_free=config.actor.padding_free
            )[0]
            for row, t in enumerate(batch):
                out[id(t)] = logp[row, : len(t.completion.token_ids)].float().tolist()
    return [out[id(t)] for t in trajectories]


def _clip_and_step(actor: Actor, grad_clip: float | None) -> float:
    params = [p for p in actor.model.parameters() if p.grad is not None]
    if grad_clip is not None:
        norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
    else:
        norm = torch.nn.utils.clip_grad_norm_(params, float("inf"))
    norm_value = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)  # DTensor under FSDP2
    actor.optimizer.step()
    actor.optimizer.zero_grad(set_to_none=True)
    return norm_value


def step_metrics(
    trajectories: Sequence[Trajectory],
    format_key: str = "format",
    canonical: Callable[[str], str] | None = None,
) -> dict[str, float]:
    """Reward, accuracy and format rate (overall and per ``problem_type``, spelled as ``canonical`` —
    the router's ``canonical_type`` — says), the mean of every reward part per type, lengths, offline
    counters."""
    out: dict[str, float] = {}
    by_type: dict[str, list[Trajectory]] = defaultdict(list)
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
        lengths = [len(t.completion.token_ids) for t in online]
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
    """Greedy accuracy and reward on held-out prompts (``val/*`` metrics), overall and per problem type."""
    outputs = engine.generate([p.require_encoded() for p in prompts], validation_params(max_tokens))
    return validation_metrics(prompts, outputs, scorer, canonical)


def validation_params(max_tokens: int) -> SamplingParams:
    return SamplingParams(n=1, temperature=0, max_tokens=max_tokens)


def validation_metrics(
    prompts: Sequence[Prompt],
    outputs: Sequence[Sequence[Completion]],
    scorer: Scorer,
    canonical: Callable[[str], str] | None = None,
) -> dict[str, float]:
    """Score the greedy answers ``outputs`` of ``prompts``: the ``val/*`` metrics."""
    answers = [Trajectory(p, i, group[0]) for i, (p, group) in enumerate(zip(prompts, outputs))]
    scorer(answers)
    metrics = step_metrics(answers, canonical=canonical)
    return {f"val/{k}": v for k, v in metrics.items() if k.startswith(("reward/", "accuracy/", "format/"))}


# --- the loop -------------------------------------------------------------------------------------


Rollout = Callable[[list["Sample"], int, int], tuple[list[list[Trajectory]], dict[str, float]]]
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
    ) -> tuple[list[list[Trajectory]], dict[str, float]]:
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
) -> tuple[list[list[Trajectory]], dict[str, float]]:
    """The ``count`` scored groups rank ``rank`` trains on in ``step``, and the counters of the rollout.

    With dynamic sampling, a group whose rewards are all equal (zero advantage) is dropped and the
    batch is refilled with new samples from the data, for at most ``dynamic_sampling_max_tries``
    rounds; after that, dropped groups fill what is still missing (they contribute no gradient).
    ``dynamic_sampling/dropped_groups`` counts the groups dropped.
    """
    cfg = config.algorithm
    kept: list[list[Trajectory]] = []
    dropped: list[list[Trajectory]] = []
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


def sleep_engine(engine: RolloutEngine) -> None:
    """Let an engine that can (``sleep()``, e.g. vLLM's sleep mode on GPUs) free its device memory for
    the actor update; its next weight refresh wakes it."""
    sleep = getattr(engine, "sleep", None)
    if callable(sleep):
        sleep()


def assign_advantages(config: TrainConfig, groups: Sequence[Sequence[Trajectory]]) -> list[Trajectory]:
    """Set every trajectory's advantage by the run's estimator (on the rewards with DAPO's overlong
    shaping, when on); the trajectories, flattened in group order."""
    cfg = config.algorithm
    rewards = torch.tensor([[t.reward for t in g] for g in groups])
    if cfg.overlong_buffer > 0:
        lengths = torch.tensor([[len(t.completion.token_ids) for t in g] for g in groups])
        rewards = rewards + algo.overlong_penalty(
            lengths, config.rollout.max_response_length, cfg.overlong_buffer, cfg.overlong_penalty
        )
    estimator = algorithms.build(cfg).estimator
    if getattr(estimator, "greedy_baseline", False) and not all(g and g[-1].baseline for g in groups):
        raise ConfigError(
            f"algorithm.adv_estimator {cfg.adv_estimator!r} needs a greedy baseline response per prompt, "
            "last in its group, which this rollout did not add: a rollout layer must call "
            "videorl.train.grpo.add_baselines when wants_greedy_baseline(config) is true"
        )
    advantages = estimator.advantages(rewards)
    flat = []
    for g, group in enumerate(groups):
        for j, t in enumerate(group):
            t.advantage = float(advantages[g, j])
            if not t.baseline:
                flat.append(t)
    return flat


def set_learning_rate(optimizer: torch.optim.Optimizer, config: TrainConfig, step: int) -> None:
    """Constant ``optim.lr`` after a linear warm-up of ``optim.lr_warmup_steps`` steps (stateless,
    so a resumed run continues with the same schedule)."""
    warmup = config.optim.lr_warmup_steps
    lr = config.optim.lr * (min(1.0, step / warmup) if warmup > 0 else 1.0)
    for group in optimizer.param_groups:
        group["lr"] = lr


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
        engine: RolloutEngine,
        rewards: RewardRouter,
        data: TrainData,
        encode: Callable[[Any], Prompt],
        io: RunIO,
        dist: Dist | None = None,
        engine_shares_actor: bool = False,
        validation: Sequence[Prompt] = (),
    ) -> None:
        self.config, self.actor, self.engine, self.rewards = config, actor, engine, rewards
        self.data, self.encode, self.io, self.dist = data, encode, io, dist or Dist()
        self.engine_shares_actor, self.validation = engine_shares_actor, list(validation)
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
            self.engine.update_weights(refresh_state(self.actor, self.engine))
        return start

    def step_once(self, step: int, timer: StageTimer) -> dict[str, float]:
        config, actor, engine, dist = self.config, self.actor, self.engine, self.dist
        prompts_per_rank = max(1, config.data.rollout_batch_size // dist.world_size)
        rollout = local_rollout(config, engine, self.scorer, actor.backend, self.encode, timer)
        kept, extra = collect_groups(config, step, prompts_per_rank, self.data, rollout, dist.rank)
        flat = assign_advantages(config, kept)
        if self._parity_due:  # before any update, after a resume too
            self._parity_due = False
            with timer("parity_check"):
                extra.update(first_step_check(config, actor, flat, dist))
        set_learning_rate(actor.optimizer, config, step)
        if not self.engine_shares_actor:
            sleep_engine(engine)
        with timer("actor"):
            actor_metrics = update(config, actor, flat, dist, timer)
        if not self.engine_shares_actor:
            with timer("weight_sync"):
                engine.update_weights(refresh_state(actor, engine))
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
    engine: RolloutEngine,
    rewards: RewardRouter,
    data: TrainData,
    encode: Callable[[Any], Prompt],
    io: RunIO,
    dist: Dist | None = None,
    engine_shares_actor: bool = False,
    validation: Sequence[Prompt] = (),
    evaluations: Sequence[PeriodicEvaluation] = (),
    on_step: OnStep | None = None,
) -> int:
    """Train with :class:`LocalStep` in :func:`videorl.train.loop.run` until ``trainer.max_steps``,
    resuming when ``trainer.resume`` says so; the last step done."""
    from videorl.train.loop import run  # the loop imports this module's StageTimer

    driver = LocalStep(
        config,
        actor=actor,
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
