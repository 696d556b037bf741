"""The algorithms' pieces: advantages (GRPO, RLOO, REINFORCE++), losses (PPO clip, GSPO, CISPO),
KL, entropy, batching rules.

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

from videorl.algorithms import PolicyLoss

LossAggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
CorrectionMode = Literal["tis", "mis"]
CorrectionLevel = Literal["token", "sequence"]

__all__ = [
    "CorrectionLevel",
    "CorrectionMode",
    "LossAggMode",
    "MixPolicyDecision",
    "PolicyLoss",
    "RolloutCorrection",
    "aggregate",
    "batch_whitened_advantages",
    "cispo_loss",
    "grpo_advantages",
    "gspo_loss",
    "informative_groups",
    "kl_k3",
    "mix_policy_decision",
    "overlong_penalty",
    "pack_by_token_budget",
    "policy_loss",
    "remax_advantages",
    "rloo_advantages",
    "rollout_correction",
]


# --- advantages --------------------------------------------------------------------------------


def grpo_advantages(rewards: torch.Tensor, *, eps: float = 1e-6, norm_by_std: bool = True) -> torch.Tensor:
    """Group-normalised advantages ``(r - mean) / (std + eps)`` of ``rewards`` shaped ``(G, n)``.

    ``std`` is the unbiased standard deviation of each group (as EasyR1/veRL). A group whose rewards
    are all equal gets exactly 0 (not a rounding residue divided by ``eps``); so does a group of one.
    ``norm_by_std=False`` subtracts the mean only.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be shaped (groups, n), got {tuple(rewards.shape)}")
    rewards = rewards.to(torch.float32)
    mean = rewards.mean(dim=1, keepdim=True)
    centered = rewards - mean
    if norm_by_std:
        std = rewards.std(dim=1, keepdim=True) if rewards.shape[1] > 1 else torch.zeros_like(mean)
        centered = centered / (std + eps)
    constant = rewards.amax(dim=1, keepdim=True) == rewards.amin(dim=1, keepdim=True)
    return torch.where(constant, torch.zeros_like(centered), centered)


def rloo_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """RLOO: each reward minus the mean of the *other* rewards of its group, ``n/(n-1)·(r - mean)``.

    A group of one has no other response to compare with: 0.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be shaped (groups, n), got {tuple(rewards.shape)}")
    rewards = rewards.to(torch.float32)
    n = rewards.shape[1]
    if n < 2:
        return torch.zeros_like(rewards)
    return (rewards - rewards.mean(dim=1, keepdim=True)) * (n / (n - 1))


def remax_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """ReMax: each sampled reward minus the reward of its prompt's greedy response, which is the last
    column of ``rewards`` ``(G, n + 1)``; the greedy response's own advantage is 0 (it is not trained on)."""
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(
            f"rewards must be shaped (groups, n + 1) with the greedy reward last, got {tuple(rewards.shape)}"
        )
    rewards = rewards.to(torch.float32)
    advantages = rewards - rewards[:, -1:]
    return torch.cat([advantages[:, :-1], torch.zeros_like(advantages[:, -1:])], dim=1)


def batch_whitened_advantages(
    rewards: torch.Tensor, *, eps: float = 1e-6, group_baseline: bool = False
) -> torch.Tensor:
    """REINFORCE++: rewards normalised over the whole batch, ``(r - mean) / (std + eps)``.

    ``group_baseline`` (REINFORCE++-baseline) subtracts each group's mean first. ``std`` is the
    unbiased standard deviation over every response of the batch; a batch whose (centred) rewards are
    all equal gets exactly 0.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be shaped (groups, n), got {tuple(rewards.shape)}")
    values = rewards.to(torch.float32)
    if group_baseline:
        values = values - values.mean(dim=1, keepdim=True)
    if values.numel() < 2 or bool(values.amax() == values.amin()):
        return torch.zeros_like(values)
    return (values - values.mean()) / (values.std() + eps)


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


# --- logits, log-probs, entropy ----------------------------------------------------------------


# --- losses ------------------------------------------------------------------------------------


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    mode: LossAggMode = "token-mean",
    *,
    denominator: float | None = None,
) -> torch.Tensor:
    """Reduce per-token ``values`` ``(B, T)`` over the valid tokens of ``mask`` to a scalar.

    ``token-mean``: the sum over valid tokens divided by their count. ``seq-mean-token-mean``: the
    mean over each sequence's valid tokens, then the mean over sequences that have any.
    ``seq-mean-token-sum-norm`` (Dr. GRPO): the sum over valid tokens divided by a constant, by
    default the padded size ``B × T`` (pass ``sequences × max response length``).
    ``denominator`` replaces the count (of tokens, or of sequences): pass the count of the whole
    mini-batch when gradients are accumulated over micro-batches, so that every token (sequence)
    weighs the same whatever micro-batch it was packed in.
    """
    mask = mask.to(values.dtype)
    if mode == "token-mean":
        total = (values * mask).sum()
        count = mask.sum() if denominator is None else torch.tensor(float(denominator))
    elif mode == "seq-mean-token-mean":
        tokens = mask.sum(dim=-1)
        per_seq = (values * mask).sum(dim=-1) / tokens.clamp(min=1)
        total = per_seq.sum()
        count = (
            (tokens > 0).sum().to(values.dtype) if denominator is None else torch.tensor(float(denominator))
        )
    elif mode == "seq-mean-token-sum-norm":
        total = (values * mask).sum()
        count = torch.tensor(float(mask.numel() if denominator is None else denominator))
    else:
        raise ValueError(
            f"unknown loss aggregation mode {mode!r}; use 'token-mean', 'seq-mean-token-mean' or "
            "'seq-mean-token-sum-norm'"
        )
    return total / count.clamp(min=1).to(values.device)


def policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    mode: LossAggMode = "token-mean",
    denominator: float | None = None,
) -> PolicyLoss:
    """DAPO clip-higher PPO loss, aggregated at token level.

    Per token: ``ratio = exp(log_prob - old_log_prob)``, ``loss = max(-A·ratio, -A·clip(ratio,
    1 - clip_low, 1 + clip_high))``. ``advantages`` is per sequence ``(B,)`` or per token ``(B, T)``.
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    log_ratio = log_probs - old_log_probs
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    valid = mask.to(per_token.dtype)
    count = valid.sum().clamp(min=1)
    with torch.no_grad():
        clip_fraction = ((clipped > unclipped).to(per_token.dtype) * valid).sum() / count
        approx_kl = (-log_ratio * valid).sum() / count
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
        ratio = torch.exp(seq_log_ratio.detach().unsqueeze(-1) + log_probs - log_probs.detach())
    else:
        ratio = torch.exp(seq_log_ratio).unsqueeze(-1).expand_as(log_probs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    count = valid.sum().clamp(min=1)
    with torch.no_grad():
        clip_fraction = ((clipped > unclipped).to(per_token.dtype) * valid).sum() / count
        approx_kl = (-log_ratio * valid).sum() / count
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
    ratio = torch.exp(log_ratio.detach())
    weight = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = -weight * advantages * log_probs
    valid = mask.to(per_token.dtype)
    count = valid.sum().clamp(min=1)
    with torch.no_grad():
        clip_fraction = ((weight != ratio).to(per_token.dtype) * valid).sum() / count
        approx_kl = (-log_ratio * valid).sum() / count
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

    ``k3 = exp(ref - logp) - (ref - logp) - 1`` (≥ 0, unbiased under samples of the policy), clamped
    to ``[-clamp, clamp]`` as veRL does to keep outliers from exploding.
    """
    diff = ref_log_probs - log_probs
    return torch.clamp(torch.exp(diff) - diff - 1.0, min=-clamp, max=clamp)


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
