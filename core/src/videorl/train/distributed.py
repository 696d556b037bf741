"""Processes started by torchrun: process group, FSDP2 sharding, full state dicts.

Sharding follows the model's own ``_no_split_modules`` (the decoder layers and vision blocks of an
HF model), then the vision tower and the root, as FSDP2 (``fully_shard``) expects.
"""

from __future__ import annotations

import os
from typing import Any, cast

import torch

from videorl.grpo import Dist


def init_distributed() -> Dist:
    """Join the process group torchrun describes (``WORLD_SIZE`` > 1); gloo on CPU, NCCL on GPUs."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size == 1:
        return Dist()
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend)
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
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
    if compute_dtype != torch.float32:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    units = set(getattr(model, "_no_split_modules", None) or [])
    for module in model.modules():
        if type(module).__name__ in units:
            fully_shard(module, **options)
    for name, module in model.named_modules():
        if name.endswith("visual") and name.count(".") <= 1:
            fully_shard(module, **options)
    fully_shard(model, **options)
    return model


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's parameters and buffers on every rank, on the CPU, with HF names."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    # cpu_offload=True would leave every rank but 0 empty; each rank's engine needs the weights.
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    return {k: cast(torch.Tensor, v).detach().cpu() for k, v in state.items()}


def load_full_state_dict(model: torch.nn.Module, state: dict[str, Any]) -> None:
    """Load a full (unsharded) state dict into a sharded model."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))
