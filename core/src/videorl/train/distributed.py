"""Processes started by torchrun: process group, FSDP2 sharding, full state dicts.

Sharding follows the model's own ``_no_split_modules`` (the decoder layers and vision blocks of an
HF model), then the vision tower and the root, as FSDP2 (``fully_shard``) expects.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

import torch


@dataclass
class Dist:
    """This process's place among the training processes (one process: rank 0 of 1)."""

    rank: int = 0
    world_size: int = 1

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


def gather_objects(value: Any, dist: Dist) -> list[Any]:
    """``value`` of every rank, in rank order (a collective; JSON-like values only)."""
    if dist.world_size == 1:
        return [value]
    import torch.distributed as tdist

    out: list[Any] = [None] * dist.world_size
    tdist.all_gather_object(out, value)
    return out


def average_over_ranks(metrics: dict[str, float], dist: Dist) -> dict[str, float]:
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


def backend_devices(backend: str) -> set[str]:
    """The device types a process-group backend string serves (``"cpu:gloo,cuda:nccl"``, ``"gloo"``)."""
    if ":" not in backend:
        return {"cuda"} if backend == "nccl" else {"cpu"}
    return {part.split(":")[0] for part in backend.split(",")}


def init_distributed() -> Dist:
    """Join the process group torchrun describes (``WORLD_SIZE`` > 1): gloo on CPU; on GPUs gloo for
    CPU tensors and NCCL for CUDA tensors (:func:`process_group_options`)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return Dist()
    import torch.distributed as dist

    if not dist.is_initialized():
        cuda = torch.cuda.is_available()
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if cuda:
            torch.cuda.set_device(local_rank)  # before any CUDA call, so nothing lands on GPU 0
        dist.init_process_group(**process_group_options(cuda=cuda, local_rank=local_rank))
    return Dist(dist.get_rank(), dist.get_world_size())


def local_device() -> torch.device:
    """This process's accelerator (``cuda:LOCAL_RANK`` under torchrun) or the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def close_distributed() -> None:
    """Leave the process group (when one was joined)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def shard_model(model: torch.nn.Module, compute_dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """Apply FSDP2 ``fully_shard`` to each unit named by ``model._no_split_modules``, the vision tower
    (``visual``) and the root. Parameters stay in their dtype (float32 masters); with another
    ``compute_dtype`` the forward runs in it and gradients are reduced in float32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    options: dict[str, Any] = {}
    root = options
    if compute_dtype != torch.float32:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
        # The root does not cast the model's floating inputs: ``second_per_grid_ts`` must reach the
        # position computation in float32 (in bfloat16 Qwen2.5-VL's temporal positions differ from
        # the engine's at non-round frame rates). Pixels are cast by the vision units' own policy.
        root = {
            "mp_policy": MixedPrecisionPolicy(
                param_dtype=compute_dtype, reduce_dtype=torch.float32, cast_forward_inputs=False
            )
        }
    units = set(getattr(model, "_no_split_modules", None) or [])
    for module in model.modules():
        if type(module).__name__ in units:
            fully_shard(module, **options)
    for name, module in model.named_modules():
        if name.endswith("visual") and name.count(".") <= 1:
            fully_shard(module, **options)
    fully_shard(model, **root)
    return model


def load_device(rank: int) -> torch.device:
    """Where a rank builds a model it will shard: rank 0 reads the weights into host memory, the
    other ranks build the architecture alone on ``meta`` and receive their shards
    (:func:`fill_from_rank0`), so a node reads the checkpoint once, not once per GPU."""
    return torch.device("cpu" if rank == 0 else "meta")


def fill_from_rank0(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Give a sharded ``model`` rank 0's weights: ``state`` is rank 0's full state dict (taken before
    sharding), empty on the other ranks, whose meta shards are allocated here on their device.

    Each tensor goes from rank 0 to the others one at a time (``broadcast_from_rank0``), and every
    rank keeps its shard. Non-persistent buffers (rotary ``inv_freq``) are in no state dict: they are
    broadcast from rank 0 as they are."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    device = local_device()
    if dist.get_rank() != 0:
        model.to_empty(device=device)
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, cast(dict[str, Any], state), options=options)
    for module in model.modules():
        for name in sorted(module._non_persistent_buffers_set):
            buffer = module._buffers.get(name)
            if buffer is not None:
                dist.broadcast(buffer, src=0)


def full_state_dict(model: torch.nn.Module, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The whole model's parameters and buffers on every rank, on the CPU, with HF names; floating
    tensors cast to ``dtype`` (on the device, before the copy) when given.

    Gathered one tensor at a time and moved to host memory at once, so the device never holds more
    than one full tensor beside its shards (a whole-model gather would put the full float32 model,
    33 GB at 7B, on a GPU where the rollout engine may be awake). Every rank gets the whole state
    (``cpu_offload=True`` would leave all but rank 0 empty; each rank's engine needs the weights)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    from torch.distributed.tensor import DTensor

    out: dict[str, torch.Tensor] = {}
    for name, value in get_model_state_dict(model).items():
        tensor = cast(torch.Tensor, value).detach()
        full = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
        if dtype is not None and full.is_floating_point():
            full = full.to(dtype)
        out[name] = full.cpu()
        del full
    return out


def attention_implementation(compute_dtype: torch.dtype) -> str | None:
    """``flash_attention_2`` where it runs: CUDA, the ``flash_attn`` package installed and a 16-bit
    compute dtype (it has no float32 kernels). None elsewhere: the model keeps its default (sdpa).

    With sdpa the Qwen2.5-VL vision tower loops over its ~1,600 attention windows per video, layer
    by layer; flash-attention takes them as one variable-length batch."""
    import importlib.util

    if not torch.cuda.is_available() or compute_dtype not in (torch.bfloat16, torch.float16):
        return None
    return "flash_attention_2" if importlib.util.find_spec("flash_attn") is not None else None


def use_fast_attention(model: Any, compute_dtype: torch.dtype) -> None:
    """Switch ``model`` (an HF model: language model and vision tower) to
    :func:`attention_implementation`, when there is one."""
    chosen = attention_implementation(compute_dtype)
    if chosen is not None and hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(chosen)


def release_cached_memory() -> None:
    """Give the CUDA caching allocator's free blocks back to the device (a no-op without CUDA).

    The rollout engine runs in other processes (vLLM's engine core) and sees only what this process's
    allocator has returned: blocks freed by the update, a gather or the sharding stay reserved here
    until this call, and vLLM's free-memory check at start-up and at each wake-up would fail."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
