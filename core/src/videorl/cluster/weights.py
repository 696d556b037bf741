"""How the split placement's rollout workers get the actor's weights: one small transport interface.

A *version* is the step whose update produced the weights (0: the base model). The actor ranks
:meth:`~WeightTransport.publish` a version; :meth:`~WeightTransport.deliver` loads it into every
rollout engine, which then stamps what it generates with that version. The synchronous controller
delivers right after publishing; the asynchronous one (:mod:`videorl.cluster.async_driver`) delivers
when the rollouts it runs ahead may use the version. Today's transport is Ray's object store
(:class:`ObjectStoreTransport`); an NCCL broadcast between the actor and rollout GPUs would implement
the same two methods.

A version travels as buckets (:func:`publish_buckets`): actor rank 0 alone keeps the gathered
weights (the other ranks take part in each gather and drop it), packs each bucket of
``rollout.weight_bucket_mb`` into one flat ``uint8`` numpy array and puts that in the object store,
which stores a numpy array's buffer as it is (no pickle of the tensors; a reader maps it without a
copy). The handle is the list of ``[object ref, layout]``; a rollout worker reads the tensors as
views of the mapped buffers (:func:`bucket_tensors`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

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
        handle, size = replies[0]
        return Published(version, handle, float(size))

    def deliver(self, published: Published) -> float:
        seconds = self.cluster.call(
            "weight sync",
            published.version,
            [(w, "load_weights", (published.handle, published.version)) for w in self.cluster.rollouts],
        )
        return max(seconds, default=0.0)


def publish_buckets(
    named: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int, put: Callable[[Any], Any]
) -> list[Any]:
    """Actor rank 0's side: ``named`` (consumed one tensor at a time, on the host or the GPU) packed
    bucket by bucket into flat ``uint8`` numpy arrays, each handed to ``put`` (``ray.put``) as soon
    as it is full; ``[handle, bytes]``, the handle a list of ``[put's reference, layout]``."""
    import numpy as np
    import torch

    from videorl.rollout.vllm_weights import buckets, layout, pack_into

    handle: list[list[Any]] = []
    total = 0
    for group in buckets(named, bucket_bytes):
        meta = layout(group)
        array = np.empty(meta["total"], dtype=np.uint8)
        if array.size:  # torch.from_numpy of an empty array is fine, but there is nothing to copy
            pack_into(torch.from_numpy(array), group, meta)
            if any(t.is_cuda for _, t in group):
                torch.cuda.synchronize()  # the device-to-host copies are in the array before it is put
        handle.append([put(array), meta])
        total += meta["total"]
        del group
    return [handle, total]


def bucket_tensors(handle: list[Any], get: Callable[[Any], Any]) -> dict[str, torch.Tensor]:
    """A rollout worker's side: the tensors of a :func:`publish_buckets` handle, as views of the
    buckets ``get`` (``ray.get``) returns (read-only object-store memory; engines copy what they load)."""
    from videorl.rollout.vllm_weights import decode_bytes

    state: dict[str, torch.Tensor] = {}
    for ref, meta in handle:
        state.update(decode_bytes({**meta, "data": memoryview(get(ref))}))
    return state
