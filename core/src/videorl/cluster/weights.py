"""How the split placement's rollout workers get the actor's weights: one small transport interface.

A *version* is the step whose update produced the weights (0: the base model). The actor ranks
:meth:`~WeightTransport.publish` a version; :meth:`~WeightTransport.deliver` loads it into every
rollout engine, which then stamps what it generates with that version. The synchronous controller
delivers right after publishing; the asynchronous one (:mod:`videorl.cluster.async_driver`) delivers
when the rollouts it runs ahead may use the version. Today's transport is Ray's object store
(:class:`ObjectStoreTransport`); an NCCL broadcast between the actor and rollout GPUs would implement
the same two methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from videorl.cluster.runtime import Cluster


@dataclass(frozen=True)
class Published:
    """One published version: the transport's handle to its weights and their size in bytes."""

    version: int
    handle: Any
    size: float


class WeightTransport(Protocol):
    """Moves a version of the actor's weights to the rollout engines."""

    def publish(self, version: int) -> Published:
        """Gather the actor's current weights as ``version`` (a collective over the actor ranks)."""
        ...

    def deliver(self, published: Published) -> float:
        """Load ``published`` into every rollout engine; the longest load, in seconds."""
        ...


class ObjectStoreTransport:
    """Actor rank 0 puts the full weights (in the engines' dtype) in Ray's object store; every rollout
    worker reads them from there. The handle keeps the object alive until dropped."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def publish(self, version: int) -> Published:
        replies = self.cluster.call(
            "weight sync", version, [(a, "publish_weights", ()) for a in self.cluster.actors]
        )
        ref, size = replies[0]
        return Published(version, ref, float(size))

    def deliver(self, published: Published) -> float:
        seconds = self.cluster.call(
            "weight sync",
            published.version,
            [(w, "load_weights", (published.handle, published.version)) for w in self.cluster.rollouts],
        )
        return max(seconds, default=0.0)
