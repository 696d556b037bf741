"""FSDP2 sharding of the policy: shard, fill from rank 0, gather the full state one tensor at a time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import torch

from videorl.devices import local_device


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


def iter_full_state(
    model: torch.nn.Module, dtype: torch.dtype | None = None, *, on_device: bool = False, keep: bool = True
) -> Iterator[tuple[str, torch.Tensor]]:
    """The whole model's parameters and buffers with HF names, one full tensor at a time (a
    collective: every rank must run the generator to its end, in the same order); floating tensors
    cast to ``dtype`` on the device when given.

    ``on_device``: each tensor stays on the device it was gathered on (a CUDA IPC refresh copies it
    into its staging buffer there), else it is moved to host memory at once. ``keep=False``: this
    rank takes part in each gather and drops the result at once, yielding nothing (the ranks that
    do not publish the weights: no host copy, one full tensor on the device at a time). Either way
    the device never holds more than one full tensor beside its shards, and whatever the consumer
    keeps of the earlier ones (a whole-model gather would put the full float32 model, 33 GB at 7B, on
    a GPU where the rollout engine may be awake). Every rank can have the whole state: each rank's
    engine may need it (``cpu_offload=True`` would leave all but rank 0 empty)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    from torch.distributed.tensor import DTensor

    for name, value in get_model_state_dict(model).items():
        tensor = cast(torch.Tensor, value).detach()
        full = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
        if not keep:
            del full
            continue
        if dtype is not None and full.is_floating_point():
            full = full.to(dtype)
        yield name, full if on_device else full.cpu()
        del full
