"""The Qwen-VL vision tower sharded by temporal patches over a sequence-parallel group.

Qwen2-VL's, Qwen2.5-VL's and Qwen3-VL's towers attend within one temporal patch (``cu_seqlens``
repeat ``h·w`` per ``t`` of ``grid_thw``; Qwen2.5-VL's windows are cut per ``t``) and their vision
positions (Qwen3-VL's interpolated embeddings too) depend on ``h`` and ``w`` only (transformers'
``vision_utils``): a video of grid ``(t, h, w)`` encodes
as the items ``(t1, h, w)``, ``(t2, h, w)`` do, its patches being ``t``-major. Each rank encodes the
temporal patches the shard assigns it (an image is one patch), as runs of consecutive patches of an
item; the shard's all-gather (:class:`videorl.actor.tower_shard.TowerShard`) gives every rank all the
embeddings (Qwen3-VL's DeepStack features beside them), which are put back in the tower's order
(item by item). A rank assigned nothing still
runs the tower, on zero patches with a zero weight, so that FSDP gathers the same parameters on every
rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

__all__ = ["Shard", "encode_sharded", "joined", "unit_keys"]


class Shard(Protocol):
    """What the encoding needs of core's ``TowerShard`` (passed in by the sharded forward)."""

    size: int
    rank: int

    def assign(self, keys: Sequence[int], weights: Sequence[int]) -> list[int]: ...

    def gather(self, local: torch.Tensor, counts: Sequence[int]) -> torch.Tensor: ...


def unit_keys(
    token_rows: Sequence[int], grids: Sequence[Sequence[int]], items: Sequence[int], merge: int
) -> dict[int, list[int]]:
    """Where each temporal patch of each distinct item first appears in the row: ``token_rows`` are
    the row positions of the modality's placeholders in order, item ``i`` (grid ``grids[i]``) uses
    distinct item ``items[i]`` and holds the next ``t·h·w / merge²`` of them, ``h·w / merge²`` per
    temporal patch (transformers scatters the embeddings in that order)."""
    keys: dict[int, list[int]] = {}
    offset = 0
    for (t, h, w), d in zip(grids, items):
        per = h * w // merge**2
        if offset + t * per > len(token_rows):
            raise ValueError(f"tower shard: {len(token_rows)} placeholders for grids {list(grids)}")
        first = [token_rows[offset + j * per] for j in range(t)]
        keys[d] = [min(a, b) for a, b in zip(keys[d], first)] if d in keys else first
        offset += t * per
    return keys


def joined(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """``parts`` concatenated along dim 0; one part as it is (a copy of a whole video's pixels would
    live through the tower's forward on every rank)."""
    import torch

    return parts[0] if len(parts) == 1 else torch.cat(list(parts))


def _rows(pieces: Sequence[torch.Tensor], start: int, stop: int) -> torch.Tensor:
    """Rows ``start:stop`` of ``pieces`` taken back to back (a view: the range lies within one piece)."""
    for piece in pieces:
        if start >= 0 and stop <= piece.shape[0]:
            return piece[start:stop]
        start, stop = start - piece.shape[0], stop - piece.shape[0]
    raise ValueError(f"tower shard: patches {start}:{stop} span two pixel tensors or lie past their end")


def encode_sharded(
    visual: Any,
    pixels: Sequence[torch.Tensor],
    grids: Sequence[Sequence[int]],
    keys: Sequence[Sequence[int]],
    shard: Shard,
    merge: int,
    dummy: Any,
) -> tuple[Any, torch.Tensor, list[torch.Tensor]]:
    """The tower's output type, its ``pooler_output`` and DeepStack features for the items of
    ``grids`` (their patches: ``pixels`` back to back, each item within one tensor, so that no rank
    copies them all), this rank encoding only its share of the
    temporal patches. ``keys[d][j]``: the row position of item ``d``'s patch ``j`` (orders the units);
    ``dummy()``: the tower on zero patches (a rank with no share)."""
    import torch

    units = [(d, j) for d, (t, _, _) in enumerate(grids) for j in range(t)]
    area = [h * w for _, h, w in grids]
    owner = shard.assign([keys[d][j] for d, j in units], [area[d] for d, _ in units])
    order = sorted(range(len(units)), key=lambda u: (keys[units[u][0]][units[u][1]], u))
    runs: list[list[int]] = []  # this rank's runs of consecutive patches of one item: [d, j0, j1]
    for u in order:
        d, j = units[u]
        if owner[u] != shard.rank:
            continue
        if runs and runs[-1][0] == d and runs[-1][2] == j:
            runs[-1][2] = j + 1
        else:
            runs.append([d, j, j + 1])
    starts = [0]
    for t, h, w in grids:
        starts.append(starts[-1] + t * h * w)
    zero: torch.Tensor | None = None
    if runs:
        spans = [(starts[d] + j0 * area[d], starts[d] + j1 * area[d]) for d, j0, j1 in runs]
        mine = joined([_rows(pixels, a, b) for a, b in spans])
        sub = torch.tensor([[j1 - j0, *grids[d][1:]] for d, j0, j1 in runs], device=mine.device)
        out = visual(mine, grid_thw=sub)
    else:
        out = dummy()
    deepstack = list(getattr(out, "deepstack_features", None) or [])
    local = torch.cat([out.pooler_output, *deepstack], dim=-1)
    if not runs:  # the dummy's rows are not embeddings; its 0-weighted mean keeps its parameters in the graph
        zero = local.float().mean() * 0.0
        local = local[:0]
    tokens = [area[d] // merge**2 for d, _ in units]
    counts = [sum(tokens[u] for u in range(len(units)) if owner[u] == r) for r in range(shard.size)]
    gathered = shard.gather(local, counts)  # the units' rows in key order: the runs are contiguous in it
    if zero is not None:
        gathered = gathered + zero.to(gathered.dtype)
    row = {}
    at = 0
    for u in order:
        row[u] = at
        at += tokens[u]
    index = torch.cat([torch.arange(row[u], row[u] + tokens[u]) for u in range(len(units))])
    full = gathered.index_select(0, index.to(gathered.device))
    width = out.pooler_output.shape[-1]
    parts = list(torch.split(full, width, dim=-1))
    return type(out), parts[0], parts[1:]
