"""Saving and resuming a training run's state: the model and optimizer (:class:`ActorState`), each rank's
data position and RNG state, through a :class:`~videorl.runs.checkpoint.CheckpointManager`; every rank
resumes from the same checkpoint (:func:`agreed_checkpoint`), also with another number of processes or
``actor.sequence_parallel_size`` (:func:`restore_position`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from videorl.errors import ConfigError
from videorl.runs.checkpoint import Checkpoint, CheckpointManager
from videorl.runs.manifest import STATE_FILE, CheckpointError, step_of
from videorl.runs.tensors import capture_rng_state, restore_rng_state

if TYPE_CHECKING:
    import torch
    from torch.distributed.checkpoint.stateful import Stateful

    from videorl.parallel import Parallel

__all__ = [
    "ActorState",
    "GroupedPosition",
    "agreed_checkpoint",
    "group_positions",
    "restore_position",
    "resume",
    "save_checkpoint",
]


class ActorState:
    """A model and its optimizer as a :class:`~torch.distributed.checkpoint.stateful.Stateful`: under
    FSDP the state dicts hold this rank's shards (DTensors), so saving and loading never gather them.

    ``state_dict()`` of an optimizer that has not stepped yet creates its state first (zero moments,
    parameters untouched), so that a resume has tensors to load into."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.optimizer = model, optimizer

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model, optimizer = get_state_dict(self.model, self.optimizer)
        return {"model": model, "optimizer": optimizer}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state_dict["model"],
            optim_state_dict=state_dict["optimizer"],
        )


def save_checkpoint(
    step: int,
    state: Stateful,
    checkpoints: CheckpointManager,
    dist: Parallel,
    *,
    data_state: Mapping[str, Any],
    wait: bool = False,
) -> None:
    """Write the checkpoint of ``step``: ``state``'s tensors (e.g. :class:`ActorState`), each rank its
    shards, with this rank's data position ``data_state`` and RNG state (a collective: every rank calls
    it). Returns once the tensors are copied to host memory; the write finishes in the background
    (``wait``: before returning, e.g. after the last step)."""
    from videorl.parallel import gather_objects

    local = json.dumps({"data": dict(data_state), "rng": capture_rng_state()})
    ranks = [json.loads(str(s)) for s in gather_objects(local, dist)]
    checkpoints.write(
        step,
        state.state_dict(),
        dist,
        data={"ranks": [r["data"] for r in ranks], "sequence_parallel_size": dist.sp_size},
        rng=[r["rng"] for r in ranks],
        asynchronous=not wait,
    )


def resume(
    spec: str | Path | None,
    state: Stateful,
    checkpoints: CheckpointManager,
    dist: Parallel,
    *,
    data: Stateful | None = None,
) -> int:
    """Load the checkpoint ``spec`` names (``"auto"``: the latest one every rank finds undamaged; a
    directory; ``None``/``"none"``: none) into ``state``, this rank's data position into ``data`` (when
    given; :func:`restore_position`) and an RNG state (this rank's, or with another number of processes
    that of rank ``rank mod`` the number that wrote it); its step, 0 when there is none (a collective).
    Under FSDP the tensors are read as this run shards them, whatever the processes that wrote them."""
    path = agreed_checkpoint(checkpoints, None if spec is None else str(spec), dist)
    if path is None:
        return 0
    ckpt = checkpoints.load(path)
    ckpt.require_sharded("it")
    if data is not None:  # before any tensor loads: a position that cannot be restored stops here
        restore_position(ckpt, data, dist)
    written = len(ckpt.data_state.get("ranks", [])) or dist.world_size
    rng = ckpt.rng_state(dist.rank % written)
    ckpt.load_into(state, dist, checkpoints.process_group(dist))
    if rng is not None:
        restore_rng_state(rng)
    return ckpt.step


@runtime_checkable
class GroupedPosition(Protocol):
    """A data position that can continue from the positions of another number of data groups
    (:class:`videorl.train.data.TrainData`)."""

    def load_group_positions(self, positions: Sequence[tuple[int, int]], where: str) -> None: ...


def restore_position(ckpt: Checkpoint, data: Stateful, dist: Parallel) -> None:
    """Load this rank's data position from ``ckpt`` into ``data``. A :class:`GroupedPosition` gets the
    positions of the checkpoint's data groups (its ranks' ``{"epoch", "index"}``, one per group of
    ``sequence_parallel_size`` ranks) and continues from them in this run's groups, whatever their
    count; any other ``data`` gets its rank's state, written by as many processes at this ``k``."""
    ranks, k = _written_groups(ckpt)
    if isinstance(data, GroupedPosition):
        data.load_group_positions(group_positions(ckpt), f"{ckpt.path}/{STATE_FILE}")
    elif len(ranks) == dist.world_size and k == dist.sp_size:
        data.load_state_dict(ranks[dist.rank])
    else:
        raise ConfigError(
            f"{ckpt.path} was written by {len(ranks)} process(es) at actor.sequence_parallel_size={k}; "
            f"resume it with as many at that size (now {dist.world_size} at {dist.sp_size})"
        )


def _written_groups(ckpt: Checkpoint) -> tuple[list[dict[str, Any]], int]:
    """The data positions ``ckpt``'s ranks wrote and its ``sequence_parallel_size`` (checked)."""
    ranks: list[dict[str, Any]] = ckpt.data_state.get("ranks", [])
    k = ckpt.data_state.get("sequence_parallel_size", 1)  # absent: written before k existed, at 1
    if type(k) is not int or k < 1 or len(ranks) % k:
        raise CheckpointError(
            f"{ckpt.path}/{STATE_FILE}: field 'data.sequence_parallel_size' must be a positive integer "
            f"dividing the {len(ranks)} ranks of 'data.ranks', got {k!r}"
        )
    return ranks, k


def group_positions(ckpt: Checkpoint) -> list[tuple[int, int]]:
    """The ``(epoch, index)`` of each data group of ``ckpt``'s run (the ranks of a group read the same
    samples: their positions must be equal), for :meth:`GroupedPosition.load_group_positions`."""
    where = f"{ckpt.path}/{STATE_FILE}"
    ranks, k = _written_groups(ckpt)
    if not ranks:
        raise CheckpointError(f"{where}: field 'data.ranks' holds no data position")
    positions = []
    for first in range(0, len(ranks), k):
        for other in range(first + 1, first + k):
            if ranks[other] != ranks[first]:
                raise CheckpointError(
                    f"{where}: field 'data.ranks[{other}]' differs from 'data.ranks[{first}]', the first "
                    "rank of its sequence-parallel group (they take the same samples)"
                )
        epoch, index = (
            _count(where, f"data.ranks[{first}].{name}", ranks[first].get(name))
            for name in ("epoch", "index")
        )
        positions.append((epoch, index))
    return positions


def _count(where: str, field: str, value: Any) -> int:
    """``value`` when it is an integer >= 0, else a :class:`CheckpointError` naming ``field``."""
    if type(value) is not int or value < 0:
        raise CheckpointError(f"{where}: field {field!r} must be an integer >= 0, got {value!r}")
    return value


def agreed_checkpoint(checkpoints: CheckpointManager, spec: str | None, dist: Parallel) -> Path | None:
    """The checkpoint every rank resumes from (a collective): each rank checks the files it reads, so one
    rank may find a damaged shard the others never read; ``auto`` then falls back, on every rank, to the
    newest checkpoint all of them find whole. What a run keeps of its logs is cut at this step too
    (:func:`videorl.train.compose.open_checkpoints`)."""
    if dist.world_size == 1 or spec is None:  # one rank, or a new run: nothing to agree on
        return checkpoints.resolve_resume(spec)
    import torch

    def agree(value: int) -> tuple[int, int]:
        low = -int(dist.all_reduce(torch.tensor(-value), op="max"))
        return low, int(dist.all_reduce(torch.tensor(value), op="max"))

    if spec is not None and spec.strip().lower() == "auto":
        bound: int | None = None
        while True:
            found = checkpoints.latest_valid(at_most=bound)
            step = -1 if found is None else step_of(found)
            low, high = agree(step)
            if low == high:
                return found
            bound = low
    error: CheckpointError | None = None
    try:
        path = checkpoints.resolve_resume(spec)
    except CheckpointError as exc:
        path, error = None, exc
    failed, _ = agree(0 if error is None else -(dist.rank + 1))
    if error is not None:
        raise error
    if failed < 0:
        raise CheckpointError(
            f"{spec}: rank {-failed - 1} found its part of this checkpoint damaged (its log names the file); "
            "resume from an earlier checkpoint"
        )
    return path
