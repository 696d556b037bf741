"""The training mesh: where this process sits among the training processes, and their collectives.

A :class:`Parallel` separates the two things a rank's number used to mean. Data: the ``data_size``
data-parallel groups each take their own share of the prompts (``data_rank``). Sequences: the
``sp_size`` ranks of one group share that group's samples and hold a contiguous part of every
sequence (sequence parallelism, ``actor.sequence_parallel_size``: ranks ``d·k … d·k + k - 1`` form
data group ``d``; :mod:`videorl.actor.ulysses`). The ranks of a group train on the same episodes:
their first rank rolls out, the others receive its episodes (:meth:`Parallel.from_sequence_leader`).
Gradients are averaged over the whole mesh by FSDP, and the update's loss scale counts each group's
episodes ``k`` times: the average over data groups of each group's summed gradient.
Process groups are created by :func:`init_distributed` (torchrun, or the Ray actor workers).
"""

from __future__ import annotations

import logging
import math
import os
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch

from videorl.errors import ConfigError

log = logging.getLogger("videorl.parallel")


@dataclass
class Parallel:
    """This process's place in the mesh of ``world_size`` training processes (one process: rank 0 of
    1): data-parallel group ``data_rank`` of ``data_size``, position ``sp_rank`` of the ``sp_size``
    ranks that share its sequences."""

    rank: int = 0
    world_size: int = 1
    sp_size: int = 1
    #: the process group of this rank's sequence-parallel group (:func:`sequence_group`)
    sp_group: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.world_size == 1 and self.sp_size > 1:
            raise ConfigError(
                f"actor.sequence_parallel_size={self.sp_size}: one process cannot shard sequences; "
                f"train under torchrun with a multiple of {self.sp_size} processes "
                f"(torchrun --nproc-per-node {self.sp_size} -m videorl.cli train CONFIG ...)"
            )
        if self.sp_size < 1 or self.world_size % self.sp_size:
            works = [k for k in range(1, self.world_size + 1) if self.world_size % k == 0]
            raise ConfigError(
                f"actor.sequence_parallel_size={self.sp_size}: {self.world_size} training process(es) "
                f"cannot form sequence-parallel groups of {self.sp_size}; sizes that divide it: {works}"
            )
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside the {self.world_size} training processes")

    @property
    def has_process_group(self) -> bool:
        """Whether the ranks are joined by a process group (torchrun, the Ray actor workers); a
        ``Parallel`` that only describes a rank (tests, planning) has none to run collectives on."""
        import torch.distributed as tdist

        return self.world_size > 1 and tdist.is_available() and tdist.is_initialized()

    @property
    def data_rank(self) -> int:
        """Which share of the prompts this rank's group takes."""
        return self.rank // self.sp_size

    @property
    def data_size(self) -> int:
        """How many shares the prompts are cut into (the data-parallel groups)."""
        return self.world_size // self.sp_size

    @property
    def sp_rank(self) -> int:
        """This rank's part of every sequence within its group."""
        return self.rank % self.sp_size

    @property
    def is_sequence_leader(self) -> bool:
        """Whether this rank is its sequence-parallel group's first (the one that rolls out)."""
        return self.sp_rank == 0

    def from_sequence_leader(self, value: Any) -> Any:
        """The ``value`` of this rank's sequence-parallel group's first rank, on every rank of the
        group (an object broadcast over :attr:`sp_group`; the others' ``value`` is ignored). The
        objects are the process's own (episodes of this step), never read from disk."""
        if self.sp_size == 1:
            return value
        import torch.distributed as tdist

        box = [value if self.is_sequence_leader else None]
        tdist.broadcast_object_list(box, src=self.rank - self.sp_rank, group=self.sp_group)
        return box[0]

    def all_reduce(self, value: torch.Tensor, op: str = "sum") -> torch.Tensor:
        if self.world_size == 1:
            return value
        import torch.distributed as dist

        out = value.clone()
        dist.all_reduce(out, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return out

    def barrier(self) -> None:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()


def gather_objects(value: Any, dist: Parallel) -> list[Any]:
    """``value`` of every rank, in rank order (a collective; JSON-like values only)."""
    if dist.world_size == 1:
        return [value]
    import torch.distributed as tdist

    out: list[Any] = [None] * dist.world_size
    tdist.all_gather_object(out, value)
    return out


def average_over_ranks(metrics: dict[str, float], dist: Parallel) -> dict[str, float]:
    if dist.world_size == 1:
        return metrics
    return mean_over_ranks(gather_objects(metrics, dist))


def mean_over_ranks(per_rank: Sequence[dict[str, float]]) -> dict[str, float]:
    """Each metric's mean over the ranks that report it (ranks may see different problem types)."""
    keys = sorted(set().union(*per_rank))
    return {k: math.fsum(m[k] for m in per_rank if k in m) / sum(k in m for m in per_rank) for k in keys}


#: How long a collective may wait: rank 0 writing a checkpoint of a 7-8B model (model and optimizer
#: states, ~100 GB) keeps the others in a barrier far longer than torch's default 10 minutes.
COLLECTIVE_TIMEOUT = timedelta(hours=2)


def process_group_options(*, cuda: bool, local_rank: int) -> dict[str, Any]:
    """``init_process_group`` arguments for this process.

    On GPUs the group has two backends, gloo for CPU tensors and NCCL for CUDA tensors: the loop's own
    collectives (micro-batch and token counts, checkpoint objects) carry small CPU tensors, which an
    NCCL-only group refuses ("No backend type associated with device type cpu"), while FSDP's run on
    the GPU. ``device_id`` binds the rank to its GPU when the group is created."""
    if cuda:
        return {
            "backend": "cpu:gloo,cuda:nccl",
            "device_id": torch.device("cuda", local_rank),
            "timeout": COLLECTIVE_TIMEOUT,
        }
    return {"backend": "gloo", "timeout": COLLECTIVE_TIMEOUT}


def new_group(ranks: Sequence[int]) -> Any:
    """A process group of ``ranks`` (a collective: every rank calls it for every group) with the
    default group's :data:`COLLECTIVE_TIMEOUT`. torch gives a new group its own default (30 minutes):
    a tensor-parallel group's followers wait in an object collective while their leader generates the
    whole group's rollout, which can take longer."""
    import torch.distributed as dist

    return dist.new_group(list(ranks), timeout=COLLECTIVE_TIMEOUT)


def interface_of(address: str, interfaces: Iterable[tuple[str, str]]) -> str | None:
    """The name of the network interface among ``interfaces`` (name, IPv4 address) that holds ``address``."""
    return next((name for name, addr in interfaces if addr == address and name != "lo"), None)


def _ipv4_interfaces() -> list[tuple[str, str]]:
    """This host's interfaces with their IPv4 address (Linux; empty elsewhere)."""
    import fcntl
    import struct

    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:  # SIOCGIFADDR: the interface's address
                packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # no IPv4 address
            found.append((name, socket.inet_ntoa(packed[20:24])))
    return found


def route_address(master_addr: str) -> str | None:
    """This host's address on the route to ``master_addr`` (a UDP socket's connect sends nothing)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master_addr, 9))
            return str(s.getsockname()[0])
    except OSError:
        return None


def set_gloo_interface(environ: dict[str, str] | Any = os.environ) -> str | None:
    """Set ``GLOO_SOCKET_IFNAME`` for a rendezvous at a non-loopback ``MASTER_ADDR``, unless set: the
    interface on the route to it. Left alone, gloo binds to the address the host name resolves to,
    which on many distributions is 127.0.1.1 (``/etc/hosts``), and ranks of other nodes cannot reach
    it. Returns the interface chosen (None: set already, a single-host rendezvous, or not found)."""
    master = environ.get("MASTER_ADDR", "")
    if environ.get("GLOO_SOCKET_IFNAME") or not master:
        return None
    try:
        address = socket.gethostbyname(master)
    except OSError:
        return None
    if address.startswith("127."):
        return None
    chosen = interface_of(route_address(address) or "", _ipv4_interfaces())
    if chosen is not None:
        environ["GLOO_SOCKET_IFNAME"] = chosen
        log.info("GLOO_SOCKET_IFNAME=%s (the interface towards MASTER_ADDR %s)", chosen, master)
    return chosen


def backend_devices(backend: str) -> set[str]:
    """The device types a process-group backend string serves (``"cpu:gloo,cuda:nccl"``, ``"gloo"``)."""
    if ":" not in backend:
        return {"cuda"} if backend == "nccl" else {"cpu"}
    return {part.split(":")[0] for part in backend.split(",")}


def sequence_group(rank: int, world_size: int, sp_size: int) -> Any:
    """This rank's sequence-parallel group (ranks ``d·k … d·k + k - 1``); a collective: every rank
    creates every group, as ``new_group`` requires."""
    mine = None
    for start in range(0, world_size, sp_size):
        group = new_group(range(start, start + sp_size))
        if start <= rank < start + sp_size:
            mine = group
    return mine


def init_distributed(sp_size: int = 1) -> Parallel:
    """Join the process group torchrun describes (``WORLD_SIZE`` > 1): gloo on CPU; on GPUs gloo for
    CPU tensors and NCCL for CUDA tensors (:func:`process_group_options`); gloo on the interface towards
    ``MASTER_ADDR`` (:func:`set_gloo_interface`); with ``sp_size`` > 1 the sequence-parallel groups."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return Parallel(sp_size=sp_size)  # refuses sp_size > 1: one process is k = 1
    import torch.distributed as dist

    if not dist.is_initialized():
        cuda = torch.cuda.is_available()
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if cuda:
            torch.cuda.set_device(local_rank)  # before any CUDA call, so nothing lands on GPU 0
        set_gloo_interface()
        dist.init_process_group(**process_group_options(cuda=cuda, local_rank=local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()
    Parallel(rank, world, sp_size)  # the size is checked before any group is made
    group = sequence_group(rank, world, sp_size) if sp_size > 1 else None
    return Parallel(rank, world, sp_size, sp_group=group)


def close_distributed() -> None:
    """Leave the process group :func:`init_distributed` joined (``WORLD_SIZE`` > 1). At world size 1
    a process group is another library's (vLLM's in-process engine makes one): destroying it under
    vLLM made the next engine started in the process fail ("not initialized in the world group map")."""
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
