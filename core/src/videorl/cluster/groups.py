"""The actor workers of a Ray run as data × sequence groups (``actor.sequence_parallel_size``).

The ``ray.actor_workers`` workers are laid out as torchrun ranks are (:class:`videorl.parallel.Parallel`):
workers ``d·k … d·k + k - 1`` form data group ``d``. The controller holds one data order per group,
rolls each group's prompts out once (colocated: on the group's first worker; split: on a rollout
worker of its own), sends the group's episodes to every one of its ``k`` workers, and counts a group's
episodes and rollout metrics once; each worker's actor metrics are averaged over all of them, as
torchrun averages every rank's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from videorl.errors import ConfigError

if TYPE_CHECKING:
    from videorl.config import TrainConfig

T = TypeVar("T")


@dataclass(frozen=True)
class ActorGroups:
    """``workers`` actor workers in data groups of ``sp_size`` (which divides ``workers``)."""

    workers: int
    sp_size: int = 1

    def __post_init__(self) -> None:
        if self.workers < 1 or self.sp_size < 1 or self.workers % self.sp_size:
            k, n = self.sp_size, self.workers
            divisors = [d for d in range(1, n + 1) if n % d == 0]
            raise ConfigError(
                f"ray.actor_workers={n} with actor.sequence_parallel_size={k}: the actor workers form "
                f"data groups of {k} that share their samples; set ray.actor_workers to a multiple of {k} "
                f"({', '.join(str(k * i) for i in range(1, 4))}, ...) or actor.sequence_parallel_size "
                f"to one of {divisors}"
            )

    @classmethod
    def of(cls, config: TrainConfig) -> ActorGroups:
        """The layout ``config`` asks for; a :class:`ConfigError` naming the sizes that work otherwise."""
        return cls(config.ray.actor_workers, config.actor.sequence_parallel_size)

    @property
    def count(self) -> int:
        """How many data groups (shares of the prompts) there are."""
        return self.workers // self.sp_size

    def group_of(self, worker: int) -> int:
        """The data group of actor worker ``worker``."""
        return worker // self.sp_size

    def leader(self, group: int) -> int:
        """The first actor worker of ``group``."""
        return group * self.sp_size

    def rollout_worker(self, group: int, rollouts: int, colocated: bool) -> int:
        """The rollout worker (index among ``rollouts``) that generates ``group``'s prompts: colocated,
        the group's first actor worker (the rollout workers are the actor workers); split, one of the
        rollout workers in turn."""
        return self.leader(group) if colocated else group % rollouts

    def to_workers(self, per_group: Sequence[T]) -> list[T]:
        """Each actor worker's item of ``per_group`` (one per data group): its group's."""
        if len(per_group) != self.count:
            raise ValueError(f"{len(per_group)} item(s) for {self.count} data group(s)")
        return [per_group[self.group_of(w)] for w in range(self.workers)]

    def by_group(self, per_worker: Sequence[T]) -> list[list[T]]:
        """``per_worker`` (one item per actor worker) as one list per data group."""
        if len(per_worker) != self.workers:
            raise ValueError(f"{len(per_worker)} item(s) for {self.workers} actor worker(s)")
        k = self.sp_size
        return [list(per_worker[g * k : (g + 1) * k]) for g in range(self.count)]
