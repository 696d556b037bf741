"""The actor update of one step: teacher-forced forwards over micro-batches packed by a token budget,
the run's policy loss (with rollout correction, the KL and entropy terms), one optimizer step per
mini-batch; and the reference model's log-probs.

:func:`forward_responses` is the one forward of responses (the update, the reference, the parity gate
and the Ray reference workers call it): collate → optional padding-free packing → the model on the
response positions only → the LM head, log-softmax and entropy in chunks (:mod:`videorl.actor.head`),
with the episode's loss mask applied (a tool's tokens are not trained on). Sequence parallelism plugs
in here, behind the same signature."""

from __future__ import annotations

import inspect
import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING

import torch

from videorl.actor.gaps import modality_gaps
from videorl.actor.head import head_outside
from videorl.actor.ulysses import sequence_parallel_of
from videorl.algorithms import LossScale
from videorl.algorithms import formulas as algo
from videorl.episode import Episode
from videorl.model_inputs import response_stats
from videorl.packing import pack_for_backend
from videorl.parallel import Parallel
from videorl.shared_vision import same_pixels, vision_once
from videorl.timing import StageTimer

if TYPE_CHECKING:
    from videorl.actor.policy import Actor
    from videorl.algorithms import Algorithm
    from videorl.backend import ModelBackend
    from videorl.config import AlgorithmConfig, TrainConfig


def micro_batches(trajectories: Sequence[Episode], budget: int, dist: Parallel) -> list[list[Episode]]:
    """Pack by token budget, a prompt's responses together where the budget allows (the vision tower
    then runs once for all of them: :mod:`videorl.shared_vision`); every rank runs as many
    micro-batches as the rank that needs the most."""
    lengths = [len(t.prompt.require_encoded()) + len(t.response_ids) for t in trajectories]
    units = _prompt_units(trajectories, lengths, budget)
    sizes = [sum(lengths[i] for i in u) for u in units]
    count = len(algo.pack_by_token_budget(sizes, budget))
    count = int(dist.all_reduce(torch.tensor(count), op="max"))
    while len(units) < count and any(len(u) > 1 for u in units):  # another rank needs more: split here
        largest = max(range(len(units)), key=lambda k: (len(units[k]), -k))
        unit = units.pop(largest)
        units[largest:largest] = [unit[: len(unit) // 2], unit[len(unit) // 2 :]]
        sizes = [sum(lengths[i] for i in u) for u in units]
    return [
        [trajectories[i] for u in b for i in units[u]]
        for b in algo.pack_by_token_budget(sizes, budget, min_micro_batches=count)
    ]


def _prompt_units(trajectories: Sequence[Episode], lengths: Sequence[int], budget: int) -> list[list[int]]:
    """The indices of each prompt's responses (prompts with the same pixels are one:
    :func:`~videorl.shared_vision.same_pixels`), in order of first appearance, cut where a run would
    outgrow ``budget``: what packing keeps together."""
    groups: dict[Hashable, list[int]] = {}
    for i, t in enumerate(trajectories):
        groups.setdefault(same_pixels(t.prompt.require_encoded()), []).append(i)
    units: list[list[int]] = []
    for members in groups.values():
        units.append([])
        load = 0
        for i in members:
            if units[-1] and load + lengths[i] > budget:
                units.append([])
                load = 0
            units[-1].append(i)
            load += lengths[i]
    return units


def forward_responses(
    model: torch.nn.Module,
    backend: ModelBackend,
    batch: Sequence[Episode],
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
    # a tool reply's media ride in the response, where the engine saw them (Episode.response_input)
    encoded, responses = [t.prompt.require_encoded() for t in batch], [t.response_input() for t in batch]
    inputs = backend.collate(encoded, responses)
    # a prompt's pixels once, its tower run once for all of its rows (videorl.shared_vision)
    inputs, tower_once = vision_once(backend, model, inputs, encoded, responses)
    inputs = inputs.to(device=param.device, dtype=param.dtype)
    ulysses = sequence_parallel_of(model)
    packed = pack_for_backend(backend, inputs) if padding_free or ulysses else None
    mixed = compute_dtype is not None and compute_dtype != param.dtype
    kwargs = packed.model_kwargs() if packed is not None else inputs.model_kwargs()
    accepted = inspect.signature(model.forward).parameters
    if "logits_to_keep" in accepted:
        kwargs["logits_to_keep"] = packed.logits_index if packed is not None else inputs.logits_to_keep
    if (
        "use_cache" in accepted
    ):  # a teacher-forced forward never decodes on: no KV cache (1.2 GB per 21k-token row at 7B)
        kwargs["use_cache"] = False
    # sequence parallelism: this rank's part of the packed row; the decoder stack returns the
    # response positions' hidden states only. The LM head runs chunk by chunk on the hidden states
    # (actor/head.py): no [tokens, vocab] logits
    sharded = ulysses.sharding(packed, kwargs) if ulysses is not None else nullcontext()
    with (
        tower_once,
        sharded,
        head_outside(model, compute_dtype, mixed) as head,
        torch.autocast(param.device.type, dtype=compute_dtype, enabled=mixed),
    ):
        hidden = model(**kwargs).logits
    if packed is not None:
        logp, entropy = packed.response_stats(
            hidden, forbidden=forbidden, entropy_grad=entropy_grad, head=head
        )
    else:
        logp, entropy = response_stats(
            hidden, inputs, forbidden=forbidden, entropy_grad=entropy_grad, head=head
        )
    assert inputs.response_mask is not None
    mask = inputs.response_mask.to(logp.device)
    if any(t.loss_mask is not None for t in batch):  # the environment's tokens (a tool's reply) train not
        trained = [torch.tensor(t.loss_mask or [True] * len(t.response_ids)) for t in batch]
        mask = mask * _rows(trained, mask)
        # a reply's visual placeholders are forbidden targets (log-prob -inf): 0 where nothing trains,
        # or the loss's ratios (-inf - -inf) and the KL make NaN there, which a mask product keeps
        logp = logp.masked_fill(mask == 0, 0.0)
    return logp, entropy, mask


def _rows(rows: Sequence[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """Per-response rows (each as long as its response) padded into a tensor shaped as ``like``."""
    out = torch.zeros_like(like)
    for i, row in enumerate(rows):
        out[i, : row.shape[0]] = row.to(out.device, out.dtype)
    return out


def update(
    config: TrainConfig,
    actor: Actor,
    algorithm: Algorithm,
    trajectories: Sequence[Episode],
    dist: Parallel,
    timer: StageTimer,
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
    forbidden = sorted(actor.backend.forbidden_token_ids() | set(config.model.suppress_token_ids))
    minis = _mini_batches(config, trajectories)
    old = _old_logprobs(config, actor, trajectories, forbidden, dist, timer) if len(minis) > 1 else {}
    # Before the micro-batch loop, not between an actor forward and its backward (where its
    # activations would sit on top of the actor's).
    ref: dict[int, torch.Tensor] = (
        _reference_rows(actor, trajectories, forbidden, config, dist, timer) if cfg.use_kl_loss else {}
    )
    sums: dict[str, float] = defaultdict(float)
    actor.model.train()
    for u, mini in enumerate(minis, start=1):
        trained = [t for t in mini if _trained(cfg, t)]
        counts = torch.tensor([float(sum(t.policy_tokens for t in trained)), float(len(trained))])
        # FSDP averages gradients over every rank of the mesh: a rank's share of the mean is 1/world_size
        tokens, responses = (max(float(c), 1.0) / dist.world_size for c in dist.all_reduce(counts))
        scale = LossScale(tokens, responses, config.rollout.max_response_length)
        batches = micro_batches(mini, config.actor.max_tokens_per_micro_batch, dist)
        for j, batch in enumerate(batches, start=1):
            timer.show(f"update {u}/{len(minis)}, micro-batch {j}/{len(batches)}")
            _backward(config, actor, algorithm, batch, forbidden, scale, old, ref, sums)
        sums["actor/grad_norm"] += _clip_and_step(actor, config.optim.grad_clip) / len(minis)
    return _update_metrics(config, actor, trajectories, len(minis), sums)


def _mini_batches(config: TrainConfig, trajectories: Sequence[Episode]) -> list[list[Episode]]:
    """The step's groups cut into ``rollout_batch_size / global_batch_size`` mini-batches (one optimizer
    step each), whole groups in each."""
    n = config.rollout.n
    groups = [list(trajectories[i : i + n]) for i in range(0, len(trajectories), n)]
    updates = max(1, min(len(groups), config.data.rollout_batch_size // config.actor.global_batch_size))
    per_update = math.ceil(len(groups) / updates)
    return [[t for g in groups[u * per_update : (u + 1) * per_update] for t in g] for u in range(updates)]


def _old_logprobs(
    config: TrainConfig,
    actor: Actor,
    trajectories: Sequence[Episode],
    forbidden: Sequence[int],
    dist: Parallel,
    timer: StageTimer,
) -> dict[int, torch.Tensor]:
    """The log-probs of the policy before the step's first optimizer step (by ``id`` of the episode):
    the ratio's denominator when a step takes several."""
    old: dict[int, torch.Tensor] = {}
    with timer("old_logprob"), torch.no_grad():
        for batch in micro_batches(trajectories, config.actor.max_tokens_per_micro_batch, dist):
            logp, _, _ = forward_responses(
                actor.model, actor.backend, batch, forbidden, actor.compute_dtype,
                padding_free=config.actor.padding_free,
            )  # fmt: skip
            old.update({id(t): logp[row, : len(t.response_ids)] for row, t in enumerate(batch)})
    return old


def _backward(
    config: TrainConfig,
    actor: Actor,
    algorithm: Algorithm,
    batch: Sequence[Episode],
    forbidden: Sequence[int],
    scale: LossScale,
    old: dict[int, torch.Tensor],
    ref: dict[int, torch.Tensor],
    sums: dict[str, float],
) -> None:
    """One micro-batch: its forward, the policy loss with the entropy and KL terms, its backward, and
    what it adds to the step's sums."""
    cfg = config.algorithm
    logp, entropy, mask = forward_responses(
        actor.model, actor.backend, batch, forbidden, actor.compute_dtype,
        entropy_grad=cfg.entropy_coef > 0, padding_free=config.actor.padding_free,
    )  # fmt: skip
    if cfg.overlong_filtering:
        keep = torch.tensor([_trained(cfg, t) for t in batch], device=mask.device)
        mask = mask * keep.to(mask.dtype).unsqueeze(-1)
    old_logp = _rows([old[id(t)] for t in batch], logp) if old else logp.detach()
    adv = torch.tensor([t.advantage for t in batch], dtype=torch.float32, device=logp.device)
    if cfg.rollout_correction != "none":
        adv = adv.unsqueeze(-1) * _rollout_correction(cfg, batch, old_logp, mask, sums)
    pl = algorithm.loss.loss(logp, old_logp, adv, mask, scale)
    loss, valid = pl.loss, mask.float()
    # the entropy and KL terms are reduced as the loss reduces its own (veRL's loss_agg_mode)
    mode = algorithm.loss_agg_mode
    denominator = algo.denominator(mode, scale)
    if cfg.entropy_coef > 0:
        loss = loss - cfg.entropy_coef * algo.aggregate(entropy, mask, mode, denominator=denominator)
    if cfg.use_kl_loss:
        kl = algo.kl_penalty(logp, _rows([ref[id(t)] for t in batch], logp), cfg.kl_penalty)
        loss = loss + cfg.kl_coef * algo.aggregate(kl, mask, mode, denominator=denominator)
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


def _update_metrics(
    config: TrainConfig, actor: Actor, trajectories: Sequence[Episode], updates: int, sums: dict[str, float]
) -> dict[str, float]:
    """The ``actor/*``, ``rollout/logprob_diff*`` and ``rollout_correction/*`` metrics of the step."""
    cfg = config.algorithm
    tokens_all = max(sums["tokens"], 1.0)
    out = {
        "actor/loss": sums["actor/loss"] / updates,
        "actor/clip_fraction": sums["actor/clip_fraction"] / tokens_all,
        "actor/entropy": sums["actor/entropy"] / tokens_all,
        "actor/grad_norm": sums["actor/grad_norm"],
        "actor/lr": float(actor.optimizer.param_groups[0]["lr"]),
        "actor/updates": float(updates),
        "tokens/step": float(
            sum(len(t.prompt.require_encoded()) + len(t.response_ids) for t in trajectories)
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
    batch: Sequence[Episode],
    old_logp: torch.Tensor,
    mask: torch.Tensor,
    sums: dict[str, float],
) -> torch.Tensor:
    """The TIS / MIS weights of ``batch``'s tokens (``π_old / π_rollout``, the engine's log-probs being
    the rollout's), counted into ``sums`` overall and per modality of the prompts."""
    rollout = _rows([torch.tensor(t.response_logprobs, dtype=torch.float32) for t in batch], old_logp)
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


def _trained(cfg: AlgorithmConfig, t: Episode) -> bool:
    """Whether the update trains on ``t``: DAPO's overlong filtering leaves truncated responses out."""
    return not (cfg.overlong_filtering and t.completion.finish_reason == "length")


def _reference_rows(
    actor: Actor,
    trajectories: Sequence[Episode],
    forbidden: Sequence[int],
    config: TrainConfig,
    dist: Parallel,
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
                    out.update({id(t): logp[row, : len(t.response_ids)] for row, t in enumerate(batch)})
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
    reference: torch.nn.Module, backend: ModelBackend, trajectories: Sequence[Episode], config: TrainConfig
) -> list[list[float]]:
    """Per-token log-probs of each response under ``reference`` (a reference worker's whole job),
    packed into micro-batches by ``actor.max_tokens_per_micro_batch`` as the update packs them."""
    forbidden = sorted(backend.forbidden_token_ids() | set(config.model.suppress_token_ids))
    out: dict[int, list[float]] = {}
    with torch.no_grad():
        for batch in micro_batches(trajectories, config.actor.max_tokens_per_micro_batch, Parallel()):
            logp = forward_responses(
                reference, backend, batch, forbidden, padding_free=config.actor.padding_free
            )[0]
            for row, t in enumerate(batch):
                out[id(t)] = logp[row, : len(t.response_ids)].float().tolist()
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
