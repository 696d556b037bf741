"""Training data for the loop: a resumable, per-rank order over samples.

``TrainData`` decides which samples a data-parallel group trains on, in a seeded order per epoch, and
records its position so that a resumed run continues exactly where the checkpoint was taken. With
``data.prefetch`` it hands the prompt encoder (:mod:`videorl.encoding`) each batch it takes together
with the batch after it, whose frames are then prepared in the background while this step goes on.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from videorl.errors import DataError

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
