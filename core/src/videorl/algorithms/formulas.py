"""The algorithms' pieces: reward shaping, losses (PPO clip, GSPO, CISPO, GMPO, SAPO), KL estimators,
loss aggregation, batching rules (the advantages are in :mod:`videorl.algorithms.advantages`).

Pure functions on tensors (or plain sequences for the batching rules); the training loop composes
them. No function modifies its inputs in place (FSDP2 refuses in-place ops on the views it returns).

Shapes: ``B`` sequences (responses), ``T`` response tokens (right-padded; ``mask`` marks the valid
ones), ``V`` vocabulary entries, ``G`` groups (prompts) of ``n`` responses each.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from videorl.algorithms import LossScale, PolicyLoss

LossAggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
LOSS_AGG_MODES: tuple[str, ...] = LossAggMode.__args__  # type: ignore[attr-defined]
KLEstimator = Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"]
KL_ESTIMATORS: tuple[str, ...] = KLEstimator.__args__  # type: ignore[attr-defined]
#: the log-ratio bound before an exponential: exp(20) ≈ 4.9e8 is finite in float32, exp(88.7) is not,
#: and a clamp's zero gradient times an infinite one is NaN (veRL and EasyR1 clamp at ±20 too)
LOG_RATIO_BOUND = 20.0
CorrectionMode = Literal["tis", "mis"]
CorrectionLevel = Literal["token", "sequence"]

__all__ = [
    "KL_ESTIMATORS",
    "LOSS_AGG_MODES",
    "CorrectionLevel",
    "CorrectionMode",
    "KLEstimator",
    "LossAggMode",
    "MixPolicyDecision",
    "PolicyLoss",
    "RolloutCorrection",
    "aggregate",
    "cispo_loss",
    "denominator",
    "gmpo_loss",
    "gspo_loss",
    "informative_groups",
    "kl_k3",
    "kl_penalty",
    "mix_policy_decision",
    "overlong_penalty",
    "pack_by_token_budget",
    "policy_loss",
    "rollout_correction",
    "sapo_loss",
]


# --- reward shaping and filtering ----------------------------------------------------------------


def overlong_penalty(
    lengths: torch.Tensor, max_length: int, buffer: int, factor: float = 1.0
) -> torch.Tensor:
    """DAPO's soft overlong punishment, added to the reward: 0 up to ``max_length - buffer`` tokens,
    then falling linearly to ``-factor`` at ``max_length`` (and ``-factor`` beyond)."""
    if buffer <= 0:
        return torch.zeros_like(lengths, dtype=torch.float32)
    over = lengths.to(torch.float32) - (max_length - buffer)
    return -factor * torch.clamp(over / buffer, min=0.0, max=1.0)


def informative_groups(rewards: torch.Tensor) -> torch.Tensor:
    """Dynamic sampling: a ``(G,)`` bool mask of the groups whose rewards are not all equal.

    A group whose n rewards are equal has zero advantage everywhere and teaches nothing; DAPO drops
    it and refills the batch.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be shaped (groups, n), got {tuple(rewards.shape)}")
    return rewards.amax(dim=1) != rewards.amin(dim=1)


# --- losses ------------------------------------------------------------------------------------


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    mode: LossAggMode | str = "token-mean",
    *,
    denominator: float | None = None,
) -> torch.Tensor:
    """Reduce per-token ``values`` ``(B, T)`` over the valid tokens of ``mask`` to a scalar.

    ``token-mean``: the sum over valid tokens divided by their count. ``seq-mean-token-mean``: the
    mean over each sequence's valid tokens, then the mean over sequences that have any.
    ``seq-mean-token-sum``: each sequence's sum over its valid tokens, then the mean over sequences.
    ``seq-mean-token-sum-norm`` (Dr. GRPO): the sum over valid tokens divided by a constant, by
    default the padded size ``B × T`` (pass ``sequences × max response length``).
    ``denominator`` replaces the count (of tokens, or of sequences): pass the count of the whole
    mini-batch when gradients are accumulated over micro-batches, so that every token (sequence)
    weighs the same whatever micro-batch it was packed in (:func:`denominator`).
    """
    mask = mask.to(values.dtype)
    given = None if denominator is None else torch.tensor(float(denominator))
    tokens = mask.sum(dim=-1)
    if mode == "token-mean":
        total = (values * mask).sum()
        count = mask.sum() if given is None else given
    elif mode in ("seq-mean-token-mean", "seq-mean-token-sum"):
        per_seq = (values * mask).sum(dim=-1)
        if mode == "seq-mean-token-mean":
            per_seq = per_seq / tokens.clamp(min=1)
        total = per_seq.sum()
        count = (tokens > 0).sum().to(values.dtype) if given is None else given
    elif mode == "seq-mean-token-sum-norm":
        total = (values * mask).sum()
        count = torch.tensor(float(mask.numel())) if given is None else given
    else:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; use one of {', '.join(LOSS_AGG_MODES)}")
    return total / count.clamp(min=1).to(values.device)


def denominator(mode: str, scale: LossScale) -> float:
    """What :func:`aggregate` divides by in ``mode`` for a micro-batch of the mini-batch ``scale``
    counts: its tokens (token-mean), its responses (the seq-mean modes) or Dr. GRPO's constant
    ``responses × max_response_length``."""
    if mode == "token-mean":
        return scale.tokens
    if mode == "seq-mean-token-sum-norm":
        return scale.responses * scale.max_response_length
    if mode in ("seq-mean-token-mean", "seq-mean-token-sum"):
        return scale.responses
    raise ValueError(f"unknown loss aggregation mode {mode!r}; use one of {', '.join(LOSS_AGG_MODES)}")


def _ratio(log_ratio: torch.Tensor) -> torch.Tensor:
    """``exp`` of a log-ratio bounded by :data:`LOG_RATIO_BOUND`, so that neither it nor its gradient
    is infinite (a padded position, where a row is zero-padded against real log-probs, included)."""
    return torch.exp(torch.clamp(log_ratio, -LOG_RATIO_BOUND, LOG_RATIO_BOUND))


def _stats(
    flags: torch.Tensor, log_ratio: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The share of valid tokens where ``flags`` is set, and the mean of ``old - new`` over them."""
    with torch.no_grad():
        valid = mask.to(log_ratio.dtype)
        count = valid.sum().clamp(min=1)
        return (flags.to(valid.dtype) * valid).sum() / count, (-log_ratio * valid).sum() / count


def policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    clip_ratio_c: float | None = None,
    mode: LossAggMode = "token-mean",
    denominator: float | None = None,
) -> PolicyLoss:
    """DAPO clip-higher PPO loss, with an optional dual clip.

    Per token: ``ratio = exp(log_prob - old_log_prob)``, ``loss = max(-A·ratio, -A·clip(ratio,
    1 - clip_low, 1 + clip_high))``; with ``clip_ratio_c`` (dual-clip PPO, Ye et al. 2020), where
    ``A < 0`` the loss is at most ``-A·clip_ratio_c``, so a token whose ratio ran far above 1 no
    longer pushes without bound. ``advantages`` is per sequence ``(B,)`` or per token ``(B, T)``.
    ``clip_fraction`` counts the tokens where either clip applied.
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    log_ratio = log_probs - old_log_probs
    ratio = _ratio(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    flags = clipped > unclipped
    if clip_ratio_c is not None:
        bound = -advantages * clip_ratio_c
        dual = (advantages < 0) & (per_token > bound)
        per_token = torch.where(dual, bound.expand_as(per_token), per_token)
        flags = flags | dual
    clip_fraction, approx_kl = _stats(flags, log_ratio, mask)
    return PolicyLoss(aggregate(per_token, mask, mode, denominator=denominator), clip_fraction, approx_kl)


def gspo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    token_level: bool = False,
    denominator: float | None = None,
) -> PolicyLoss:
    """GSPO: the PPO clip on the sequence-level, length-normalised ratio
    ``s_i = exp(mean_t(log_prob - old_log_prob))``, averaged over sequences.

    ``token_level`` (GSPO-token): ``s_i,t = sg[s_i] · exp(log_prob_t - sg[log_prob_t])``, equal in
    value to ``s_i`` but with a per-token gradient, so per-token advantages ``(B, T)`` can differ along
    a response. ``denominator`` replaces the count of sequences.
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    valid = mask.to(log_probs.dtype)
    lengths = valid.sum(dim=-1).clamp(min=1)
    log_ratio = log_probs - old_log_probs
    seq_log_ratio = (log_ratio * valid).sum(dim=-1) / lengths
    if token_level:
        ratio = _ratio(seq_log_ratio.detach().unsqueeze(-1) + log_probs - log_probs.detach())
    else:
        ratio = _ratio(seq_log_ratio).unsqueeze(-1).expand_as(log_probs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    clip_fraction, approx_kl = _stats(clipped > unclipped, log_ratio, mask)
    loss = aggregate(per_token, mask, "seq-mean-token-mean", denominator=denominator)
    return PolicyLoss(loss, clip_fraction, approx_kl)


def cispo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 1.0,
    clip_high: float = 0.28,
    mode: LossAggMode = "token-mean",
    denominator: float | None = None,
) -> PolicyLoss:
    """CISPO: ``-sg[clip(ratio, 1 - clip_low, 1 + clip_high)] · A · log_prob`` per token.

    The importance weight is clipped and detached, so a clipped token still carries the gradient
    ``-w·A`` of its log-prob (PPO's clip zeroes it). ``clip_fraction``: the share of valid tokens
    whose weight was clipped.
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    log_ratio = log_probs - old_log_probs
    ratio = _ratio(log_ratio.detach())
    weight = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = -weight * advantages * log_probs
    clip_fraction, approx_kl = _stats(weight != ratio, log_ratio, mask)
    return PolicyLoss(aggregate(per_token, mask, mode, denominator=denominator), clip_fraction, approx_kl)


def gmpo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.4,
    clip_high: float = 0.4,
    denominator: float | None = None,
) -> PolicyLoss:
    """GMPO (Zhao et al. 2025, arXiv 2507.20673): the geometric mean of a response's token ratios,
    each clipped in log space, pessimistic as PPO's min.

    With ``δ_t = log_prob_t - old_log_prob_t`` and ``s = sgn(A_i)``: ``loss_i = -A_i · exp(mean_t
    s·min(s·δ_t, s·clip(δ_t, -clip_low, clip_high)))``, summed over responses and divided by their
    count (or ``denominator``). Per-token advantages ``(B, T)`` (rollout correction's weights) enter
    as their mean over the response's valid tokens. ``clip_fraction``: tokens whose ``δ`` was clipped.
    """
    valid = mask.to(log_probs.dtype)
    lengths = valid.sum(dim=-1).clamp(min=1)
    per_token = advantages.unsqueeze(-1).expand_as(log_probs) if advantages.dim() == 1 else advantages
    seq_advantage = (per_token * valid).sum(dim=-1) / lengths
    sign = torch.sign(seq_advantage).unsqueeze(-1)
    log_ratio = (log_probs - old_log_probs) * valid  # 0 at padding: neither value nor gradient there
    bounded = torch.clamp(log_ratio, -clip_low, clip_high)
    chosen = sign * torch.minimum(sign * log_ratio, sign * bounded)
    seq_ratio = _ratio((chosen * valid).sum(dim=-1) / lengths)
    count = float((valid.sum(dim=-1) > 0).sum()) if denominator is None else denominator
    loss = (-seq_advantage * seq_ratio).sum() / max(count, 1.0)
    clip_fraction, approx_kl = _stats((chosen != log_ratio) & (sign != 0), log_ratio, mask)
    return PolicyLoss(loss, clip_fraction, approx_kl)


def sapo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    mode: LossAggMode = "token-mean",
    denominator: float | None = None,
) -> PolicyLoss:
    """SAPO (Gao et al. 2025, Qwen, arXiv 2511.20347): a soft gate instead of the clip.

    Per token ``-f(ratio)·A`` with ``f(r) = σ(τ·(r - 1))·4/τ``, ``τ = tau_pos`` where ``A > 0`` and
    ``tau_neg`` elsewhere: at ``r = 1`` its gradient is the policy gradient's (``f'(1) = 1``) and it
    fades smoothly as the ratio leaves 1 (faster for negative advantages, ``tau_neg > tau_pos``). Nothing
    is clipped: ``clip_fraction`` is 0.
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    log_ratio = log_probs - old_log_probs
    ratio = _ratio(log_ratio)
    tau = torch.where(advantages > 0, tau_pos, tau_neg).to(ratio.dtype)
    per_token = -torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau) * advantages
    clip_fraction, approx_kl = _stats(torch.zeros_like(mask, dtype=torch.bool), log_ratio, mask)
    return PolicyLoss(aggregate(per_token, mask, mode, denominator=denominator), clip_fraction, approx_kl)


@dataclass
class RolloutCorrection:
    """Importance weights for the gap between the rollout engine's and the trainer's log-probs."""

    weights: torch.Tensor  # (B, T), detached: multiplies each token's advantage (0: dropped by MIS)
    changed: torch.Tensor  # (B, T) bool: tokens whose weight was truncated (TIS) or that were dropped (MIS)


def rollout_correction(
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    mask: torch.Tensor,
    *,
    mode: CorrectionMode,
    level: CorrectionLevel = "token",
    cap: float = 2.0,
) -> RolloutCorrection:
    """TIS / MIS weights from ``w = π_old / π_rollout``, per token or per sequence.

    ``level="token"``: ``w_t = exp(old_t - rollout_t)``; ``"sequence"``: ``w = exp(Σ_t (old_t - rollout_t))``
    over the valid tokens, the same for every token of the sequence. ``tis``: ``min(w, cap)``; ``mis``:
    ``w`` inside ``[1/cap, cap]``, else 0 (the token or sequence is dropped from the loss). A NaN rollout
    log-prob (an offline response: no engine ran it) gets weight 1.
    """
    if cap <= 1:
        raise ValueError(f"the rollout correction cap must be > 1, got {cap}")
    valid = mask.to(torch.bool)
    log_w = torch.where(torch.isnan(rollout_log_probs) | ~valid, 0.0, old_log_probs - rollout_log_probs)
    log_w = log_w.detach().to(torch.float32)
    if level == "sequence":
        log_w = log_w.sum(dim=-1, keepdim=True).expand_as(log_w)
    elif level != "token":
        raise ValueError(f"unknown rollout correction level {level!r}; use 'token' or 'sequence'")
    w = torch.exp(log_w)
    if mode == "tis":
        changed = w > cap
        weights = torch.clamp(w, max=cap)
    elif mode == "mis":
        changed = (w > cap) | (w < 1.0 / cap)
        weights = torch.where(changed, torch.zeros_like(w), w)
    else:
        raise ValueError(f"unknown rollout correction mode {mode!r}; use 'tis' or 'mis'")
    return RolloutCorrection(weights, changed & valid)


def kl_k3(log_probs: torch.Tensor, ref_log_probs: torch.Tensor, *, clamp: float = 10.0) -> torch.Tensor:
    """Per-token k3 ("low-variance") estimate of KL(policy ‖ reference).

    ``k3 = exp(d) - d - 1`` with ``d = ref - logp`` bounded by :data:`LOG_RATIO_BOUND` first (``exp``
    overflows past 88.7, and the clamp's zero gradient times that infinite one is NaN, even at a
    padded position the mask multiplies by 0), then the estimate clamped to ``[-clamp, clamp]`` (as
    veRL and EasyR1 do).
    """
    diff = torch.clamp(ref_log_probs - log_probs, -LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    return torch.clamp(torch.exp(diff) - diff - 1.0, min=-clamp, max=clamp)


def kl_penalty(
    log_probs: torch.Tensor, ref_log_probs: torch.Tensor, estimator: KLEstimator | str = "low_var_kl"
) -> torch.Tensor:
    """Per-token estimate of KL(policy ‖ reference) from the sampled tokens' log-probs (Schulman 2020,
    "Approximating KL divergence"): ``kl``/``k1`` ``logp - ref``; ``abs`` ``|logp - ref|``;
    ``mse``/``k2`` ``(logp - ref)² / 2``; ``low_var_kl``/``k3`` :func:`kl_k3`."""
    if estimator in ("kl", "k1"):
        return log_probs - ref_log_probs
    if estimator == "abs":
        return (log_probs - ref_log_probs).abs()
    if estimator in ("mse", "k2"):
        return 0.5 * (log_probs - ref_log_probs).square()
    if estimator in ("low_var_kl", "k3"):
        return kl_k3(log_probs, ref_log_probs)
    raise ValueError(f"unknown KL estimator {estimator!r}; use one of {', '.join(KL_ESTIMATORS)}")


# --- batching rules ----------------------------------------------------------------------------


def pack_by_token_budget(
    lengths: Sequence[int], budget: int, *, min_micro_batches: int = 1
) -> list[list[int]]:
    """Indices of ``lengths`` packed into micro-batches of at most ``budget`` tokens in total.

    Deterministic; a sequence is never split; a sequence longer than ``budget`` gets a micro-batch of
    its own. Sequences are placed longest first, each into the least-loaded micro-batch, with as few
    micro-batches as that rule allows (and at least ``min_micro_batches``, e.g. the largest count of
    any rank, so that every rank runs the same number of forward passes). Each micro-batch lists its
    indices in ascending order; micro-batches are ordered by their first index.
    """
    if budget < 1:
        raise ValueError(f"the token budget must be >= 1, got {budget}")
    if any(length < 0 for length in lengths):
        raise ValueError("sequence lengths must be >= 0")
    if not lengths:
        return []
    if min_micro_batches > len(lengths):
        raise ValueError(f"cannot make {min_micro_batches} micro-batches from {len(lengths)} sequences")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    oversized = [[i] for i in order if lengths[i] > budget]
    fitting = [i for i in order if lengths[i] <= budget]
    needed = math.ceil(sum(lengths[i] for i in fitting) / budget) if fitting else 0
    count = max(needed, min_micro_batches - len(oversized), 1 if fitting else 0)
    while True:  # ends at the latest when every sequence has a micro-batch of its own
        bins: list[list[int]] = [[] for _ in range(count)]
        loads = [0] * count
        for i in fitting:
            j = min(range(count), key=lambda b: (loads[b], len(bins[b]), b))
            if loads[j] + lengths[i] > budget:
                count += 1  # the least-loaded micro-batch is full: use one more
                break
            bins[j].append(i)
            loads[j] += lengths[i]
        else:
            break
    batches = [sorted(b) for b in bins + oversized]
    return sorted(batches, key=lambda b: b[0])


@dataclass
class MixPolicyDecision:
    """Which groups get their sample's offline trajectory in the last of their n slots."""

    replace: list[bool]
    threshold: float | None
    evaluated: int  # groups whose online accuracy was compared to the threshold
    candidates: int  # groups whose sample has an offline trajectory
    triggered: int  # groups below the threshold (all groups when there is no threshold)

    @property
    def replaced(self) -> int:
        return sum(self.replace)

    def metrics(self) -> dict[str, float]:
        """The ``mix_policy/*`` counters logged every step."""
        out = {
            "mix_policy/online_groups_evaluated": float(self.evaluated),
            "mix_policy/offline_candidates": float(self.candidates),
            "mix_policy/offline_triggered_groups": float(self.triggered),
            "mix_policy/offline_replaced_groups": float(self.replaced),
        }
        if self.threshold is not None:
            out["mix_policy/acc_threshold"] = float(self.threshold)
        return out


def mix_policy_decision(
    has_offline: Sequence[bool],
    online_accuracy: Sequence[Sequence[float]] | None = None,
    threshold: float | None = None,
) -> MixPolicyDecision:
    """Mix-policy: the offline trajectory takes slot ``n - 1`` of a group when its sample has one and

    - ``threshold`` is None: always;
    - otherwise: only when the mean accuracy of the group's online responses (scored before any
      replacement) is strictly below ``threshold``.
    """
    if threshold is None:
        replace = [bool(h) for h in has_offline]
        return MixPolicyDecision(replace, None, 0, sum(replace), len(replace))
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"mix_policy_accuracy_threshold must lie in [0, 1], got {threshold}")
    if online_accuracy is None or len(online_accuracy) != len(has_offline):
        raise ValueError("with a threshold, give the online accuracies of every group (one list per group)")
    below = []
    for i, accuracies in enumerate(online_accuracy):
        if not accuracies:
            raise ValueError(f"group {i} has no online responses to take the accuracy of")
        below.append(sum(accuracies) / len(accuracies) < threshold)
    replace = [bool(h) and b for h, b in zip(has_offline, below, strict=True)]
    return MixPolicyDecision(replace, threshold, len(below), sum(bool(h) for h in has_offline), sum(below))
