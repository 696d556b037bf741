"""The advantage formulas: GRPO, RLOO, ReMax, REINFORCE++ and GDPO, on the rewards of ``G`` groups of
``n`` responses each (a ``(G, n)`` tensor, group ``g`` in row ``g``).

Pure functions: no input is changed. Every estimator returns one advantage per response (outcome
rewards: every token of a response takes its response's value); a per-token normalisation (REINFORCE++
as in its paper) weighs each response by its token count instead of changing that.
"""

from __future__ import annotations

from typing import Literal

import torch

WhitenOver = Literal["tokens", "responses"]

__all__ = [
    "WhitenOver",
    "batch_whiten",
    "gdpo_advantages",
    "grpo_advantages",
    "reinforce_pp_advantages",
    "remax_advantages",
    "rloo_advantages",
]


def _grouped(rewards: torch.Tensor) -> torch.Tensor:
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be shaped (groups, n), got {tuple(rewards.shape)}")
    return rewards.to(torch.float32)


def grpo_advantages(rewards: torch.Tensor, *, eps: float = 1e-6, norm_by_std: bool = True) -> torch.Tensor:
    """Group-normalised advantages ``(r - mean) / (std + eps)`` of ``rewards`` shaped ``(G, n)``.

    ``std`` is the unbiased standard deviation of each group (as EasyR1/veRL). A group whose rewards
    are all equal gets exactly 0 (not a rounding residue divided by ``eps``); so does a group of one.
    ``norm_by_std=False`` subtracts the mean only.
    """
    rewards = _grouped(rewards)
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
    rewards = _grouped(rewards)
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


def batch_whiten(
    values: torch.Tensor, *, eps: float = 1e-6, lengths: torch.Tensor | None = None
) -> torch.Tensor:
    """``(v - mean) / (std + eps)`` over the whole batch of per-response ``values`` ``(G, n)``.

    Without ``lengths``: over the responses. With ``lengths`` ``(G, n)``: over the tokens, each response
    counted once per token it has (the whitening of token-level values that are constant along a
    response, as veRL's and EasyR1's ``masked_whiten``): ``mean = Σ L·v / Σ L`` and the unbiased
    ``std = sqrt(Σ L·(v - mean)² / (Σ L - 1))``. Fewer than two responses (tokens), or all values
    equal (over the counted ones), give exactly 0.
    """
    values = _grouped(values)
    if lengths is None:
        weights = torch.ones_like(values)
    else:
        if lengths.shape != values.shape:
            raise ValueError(f"lengths shaped {tuple(lengths.shape)} for values shaped {tuple(values.shape)}")
        weights = lengths.to(torch.float32).clamp(min=0)
    count = weights.sum()
    counted = values[weights > 0]
    if count < 2 or counted.numel() == 0 or bool(counted.amax() == counted.amin()):
        return torch.zeros_like(values)
    mean = (weights * values).sum() / count
    std = torch.sqrt((weights * (values - mean) ** 2).sum() / (count - 1))
    return (values - mean) / (std + eps)


def reinforce_pp_advantages(
    rewards: torch.Tensor,
    lengths: torch.Tensor | None = None,
    *,
    eps: float = 1e-6,
    group_baseline: bool = False,
) -> torch.Tensor:
    """REINFORCE++ (Hu 2025, eq. 10): the rewards whitened over the batch; with ``lengths``, over its
    tokens (the paper's and veRL's/EasyR1's form), without, over its responses.

    ``group_baseline`` (REINFORCE++-baseline) subtracts each group's mean first.
    """
    values = _grouped(rewards)
    if group_baseline:
        values = values - values.mean(dim=1, keepdim=True)
    return batch_whiten(values, eps=eps, lengths=lengths)


def gdpo_advantages(
    components: torch.Tensor,
    weights: torch.Tensor,
    *,
    eps: float = 1e-6,
    lengths: torch.Tensor | None = None,
) -> torch.Tensor:
    """GDPO (arXiv 2601.05242): each reward component group-normalised on its own, then summed.

    ``components`` ``(K, G, n)``: component ``k`` of every response; ``weights`` ``(K,)``. The
    advantage is ``batch_whiten(Σ_k w_k · grpo(r_k))`` (over the responses, or with ``lengths``
    over the tokens, as veRL's ``gdpo``). A component that is equal within a group adds 0 there.
    """
    if components.dim() != 3 or weights.shape != components.shape[:1]:
        raise ValueError(
            f"components must be shaped (K, groups, n) with K weights, got {tuple(components.shape)} "
            f"and {tuple(weights.shape)}"
        )
    summed = sum(
        (float(w) * grpo_advantages(c, eps=eps) for c, w in zip(components, weights, strict=True)),
        torch.zeros(components.shape[1:]),
    )
    return batch_whiten(summed, eps=eps, lengths=lengths)
