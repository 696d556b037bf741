"""The vision tower sharded by temporal patches over a sequence-parallel group (its generic part).

Under sequence parallelism (:mod:`videorl.actor.ulysses`) the ``k`` ranks of a group run the same
packed micro-batch. A family whose tower attends only within a temporal patch (Qwen2-VL, Qwen2.5-VL,
Qwen3-VL: each frame pair is its own attention segment, Qwen2.5-VL's windows lie within it, and the
vision positions depend on height and width only) can cut a video of grid ``(t, h, w)`` into items
``(t1, h, w)``, ``(t2, h, w)`` and get the same embeddings. Its backend's
``sequence_parallel_vision(model, shard)`` hook then runs the tower, on each rank, only on the
temporal patches :meth:`TowerShard.assign` gives it (an image is one temporal patch, never cut), and
:meth:`TowerShard.gather` hands every rank the embeddings of all of them, so the model merges the
whole row's visual tokens as before and Ulysses slices the rank's part. The tower's activations
shrink by ``k``; its output (the visual features) is whole on every rank, as the merged input
embeddings already were.

Assignment: the units (temporal patches) are ordered by where their first token lies in the packed
row and cut into ``k`` contiguous runs of about equal patch counts (each unit to the run its middle
falls in). Rank ``r``'s units therefore precede rank ``r + 1``'s in the row, like the token spans;
where the visual tokens fill the row evenly (a long video) they are the span's own. Balance comes
first: the tower's memory is what the cut is for, and the all-gather costs the same either way.

Gradients: every rank's loss reaches the gathered embeddings of its own token span only; the
gathered rows' backward sums those gradients over the group and hands each rank those of its own
units, so each tower parameter's gradient, summed over the group (FSDP), is the whole tower's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as tdist

__all__ = ["TowerShard"]


class _GatherRows(torch.autograd.Function):
    """Every rank's rows (``counts[r]`` of rank ``r``), in rank order; the gradient of the result is
    summed over the group and each rank keeps that of its own rows."""

    @staticmethod
    def forward(ctx: Any, local: torch.Tensor, group: Any, counts: list[int], rank: int) -> torch.Tensor:
        ctx.group, ctx.start, ctx.count = group, sum(counts[:rank]), counts[rank]
        most = max(counts)
        padded = torch.nn.functional.pad(local.contiguous(), (0, 0, 0, most - local.shape[0]))
        parts = [torch.empty_like(padded) for _ in counts]
        tdist.all_gather(parts, padded, group=group)
        return torch.cat([part[:n] for part, n in zip(parts, counts)])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        total = grad.contiguous().clone()
        tdist.all_reduce(total, group=ctx.group)
        return total[ctx.start : ctx.start + ctx.count], None, None, None


@dataclass(frozen=True)
class TowerShard:
    """One forward's split of the vision tower over the ``size`` ranks of ``group`` (this one ``rank``)."""

    group: Any
    size: int
    rank: int

    def assign(self, keys: Sequence[int], weights: Sequence[int]) -> list[int]:
        """The rank that encodes each unit: ``keys`` order the units (the row position of their first
        token), ``weights`` are their patch counts; contiguous runs in key order, balanced by weight."""
        if len(keys) != len(weights):
            raise ValueError(f"tower shard: {len(keys)} keys for {len(weights)} units")
        order = sorted(range(len(keys)), key=lambda u: (keys[u], u))
        total = sum(weights) or 1
        owner = [0] * len(keys)
        before = 0
        for u in order:
            # the unit's middle decides: rank r takes the units whose middle lies in its r-th 1/size
            owner[u] = min(self.size - 1, (2 * before + weights[u]) * self.size // (2 * total))
            before += weights[u]
        return owner

    def gather(self, local: torch.Tensor, counts: Sequence[int]) -> torch.Tensor:
        """The rows every rank encoded (rank ``r`` encoded ``counts[r]``, this one ``local``), in rank
        order, by an autograd-aware all-gather (padded to the largest count for the exchange). Every
        rank computes ``counts`` from the same batch (:meth:`assign`): no exchange of counts."""
        if len(counts) != self.size or local.shape[0] != counts[self.rank]:
            raise ValueError(
                f"tower shard: {local.shape[0]} rows encoded on rank {self.rank}, counts {counts}"
            )
        out: torch.Tensor = _GatherRows.apply(local, self.group, list(counts), self.rank)
        return out
