"""Training data for the loop: a resumable, per-rank order over samples.

``TrainData`` decides which samples a data-parallel group trains on, in a seeded order per epoch, and
records its position so that a resumed run continues exactly where the checkpoint was taken, also with
another number of data-parallel groups (:meth:`TrainData.load_group_positions`). With
``data.prefetch`` it hands the prompt encoder (:mod:`videorl.encoding`) each batch it takes together
with the batch after it, whose frames are then prepared in the background while this step goes on.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from videorl.errors import ConfigError, DataError
from videorl.runs.manifest import CheckpointError

if TYPE_CHECKING:
    from videorl.data import Sample


class _Prefetching(Protocol):
    def prefetch(self, samples: Sequence[Sample]) -> None: ...


class TrainData:
    """Samples in a seeded order per epoch; rank ``r`` of ``w`` takes every ``w``-th sample.

    ``take(k)`` returns the next ``k`` samples of this rank, crossing epochs as needed (a new seeded
    shuffle each epoch when ``shuffle``). ``state_dict`` / ``load_state_dict`` hold the position: the
    samples taken, whatever a ``prefetcher`` has prepared beyond them. ``prefetcher`` (the
    :class:`PromptEncoder`, with ``data.prefetch``) receives each batch taken followed by the next
    ``k`` samples (:meth:`upcoming`): the batch a step of the same size takes next.
    """

    def __init__(
        self,
        samples: Sequence[Sample],
        *,
        seed: int,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
        prefetcher: _Prefetching | None = None,
    ) -> None:
        if len(samples) < world_size:
            raise DataError(f"{len(samples)} training samples cannot be shared by {world_size} ranks")
        self.samples = list(samples)
        self.seed, self.shuffle, self.rank, self.world_size = seed, shuffle, rank, world_size
        self.prefetcher = prefetcher
        self.epoch, self.index = 0, 0
        self._order = self._epoch_order(0)

    def _epoch_order(self, epoch: int) -> list[int]:
        order = list(range(len(self.samples)))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        usable = len(order) - len(order) % self.world_size  # every rank gets the same count
        return order[self.rank : usable : self.world_size]

    def _walk(
        self, epoch: int, index: int, order: list[int], k: int
    ) -> tuple[list[Sample], int, int, list[int]]:
        """The ``k`` samples from position ``(epoch, index)`` of ``order``, and the position after them."""
        out: list[Sample] = []
        while len(out) < k:
            if index >= len(order):
                epoch, index = epoch + 1, 0
                order = self._epoch_order(epoch)
            out.append(self.samples[order[index]])
            index += 1
        return out, epoch, index, order

    def take(self, k: int) -> list[Sample]:
        out, self.epoch, self.index, self._order = self._walk(self.epoch, self.index, self._order, k)
        if self.prefetcher is not None:
            self.prefetcher.prefetch(out + self.upcoming(k))
        return out

    def upcoming(self, k: int) -> list[Sample]:
        """The samples the next ``take(k)`` returns; the position does not move."""
        return self._walk(self.epoch, self.index, self._order, k)[0]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self._order = self._epoch_order(self.epoch)

    def load_group_positions(self, positions: Sequence[tuple[int, int]], where: str) -> None:
        """Continue from the ``(epoch, index)`` of each of the ``len(positions)`` data groups of the run
        a checkpoint (``where``) was taken in. Group ``d`` of ``w`` takes the samples at places
        ``d, d + w, ...`` of the epoch's seeded order, which does not depend on ``w``; when the groups
        have taken its first ``P`` samples together (each the same count, or the first ``P mod w`` one
        more), this group of another count takes its share of the rest: no sample is skipped or taken
        twice. A :class:`ConfigError` when they have not (dynamic sampling takes what each group needs),
        unless the count is this run's."""
        if len(positions) == self.world_size:
            self.load_state_dict(dict(zip(("epoch", "index"), positions[self.rank], strict=True)))
            return
        epoch, taken = taken_together(positions, len(self.samples), where)
        usable = len(self.samples) - len(self.samples) % self.world_size
        # past this run's cut (a smaller tail left out), the epoch is over: its next take starts the next
        self.load_state_dict(
            {"epoch": epoch, "index": share_count(min(taken, usable), self.rank, self.world_size)}
        )


def share_count(taken: int, rank: int, size: int) -> int:
    """How many of the first ``taken`` places of an epoch's order are group ``rank`` of ``size``'s."""
    return (taken - rank + size - 1) // size if taken > rank else 0


def taken_together(positions: Sequence[tuple[int, int]], samples: int, where: str) -> tuple[int, int]:
    """The epoch of the data groups at ``positions`` (``(epoch, index)`` each, over ``samples``
    samples) and how many of its first samples they have taken together; a :class:`ConfigError` when
    what they took is not the start of one epoch's order."""
    size, share = len(positions), samples // len(positions)
    for group, (_, index) in enumerate(positions):
        if index > share:
            raise CheckpointError(
                f"{where}: data group {group} is at sample {index} of its share, which holds {share} "
                f"({samples} samples in {size} groups): the checkpoint is not of this dataset"
            )
    epoch, taken = positions[0][0], sum(index for _, index in positions)
    if any((e, i) != (epoch, share_count(taken, g, size)) for g, (e, i) in enumerate(positions)):
        raise ConfigError(
            f"{where}: its {size} data groups are at {[list(p) for p in positions[:8]]}"
            f"{' ...' if size > 8 else ''} (epoch, index): "
            "they took different numbers of samples (dynamic sampling), so their positions cannot be "
            f"cut into another number of groups without skipping or repeating samples; resume it with "
            f"{size} data groups (training processes / actor.sequence_parallel_size = {size})"
        )
    return epoch, taken
