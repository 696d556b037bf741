"""Saving and resuming a training run's state: the model and optimizer (:class:`ActorState`), each rank's
data position and RNG state, through a :class:`~videorl.runs.checkpoint.CheckpointManager`; every rank
resumes from the same checkpoint (:func:`agreed_checkpoint`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.errors import ConfigError
from videorl.runs.checkpoint import Checkpoint, CheckpointManager
from videorl.runs.manifest import CheckpointError, step_of
from videorl.runs.tensors import capture_rng_state, restore_rng_state

if TYPE_CHECKING:
    import torch
    from torch.distributed.checkpoint.stateful import Stateful

    from videorl.parallel import Parallel

__all__ = ["ActorState", "agreed_checkpoint", "require_same_sequence_groups", "resume", "save_checkpoint"]


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
    given) and this rank's RNG state; its step, 0 when there is none (a collective)."""
    path = agreed_checkpoint(checkpoints, None if spec is None else str(spec), dist)
    if path is None:
        return 0
    ckpt = checkpoints.load(path)
    ckpt.require_sharded("it")
    ranks = ckpt.rank_data_states(dist.world_size, "the same number of processes")
    require_same_sequence_groups(ckpt, dist.sp_size)
    rng = ckpt.rng_state(dist.rank)
    ckpt.load_into(state, dist, checkpoints.process_group(dist))
    if data is not None:
        data.load_state_dict(ranks[dist.rank])
    if rng is not None:
        restore_rng_state(rng)
    return ckpt.step


def require_same_sequence_groups(ckpt: Checkpoint, now: int) -> None:
    """A :class:`ConfigError` unless ``ckpt`` was written at ``actor.sequence_parallel_size`` ``now``
    (checkpoints from before the field existed were written at 1): each rank's saved data position
    counts the samples of its data group, so other groups would skip or repeat samples."""
    path, written = ckpt.path, ckpt.data_state.get("sequence_parallel_size", 1)
    if type(written) is not int or written < 1:
        raise CheckpointError(f"{path}: sequence_parallel_size must be a positive integer, got {written!r}")
    if written != now:
        raise ConfigError(
            f"{path} was written at actor.sequence_parallel_size={written}; resume it with "
            f"actor.sequence_parallel_size={written} (now {now}): each rank's data position counts the "
            "samples of its data group, and other groups would skip or repeat samples"
        )


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
