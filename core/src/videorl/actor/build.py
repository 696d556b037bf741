"""Building the actor of a rank: the policy loaded in float32 masters (or frozen in the compute dtype
under LoRA), sharded by FSDP2 over the mesh with rank 0 reading the checkpoint once, its AdamW, and the
frozen reference copy when the KL penalty needs one."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from videorl.actor.fsdp import fill_from_rank0, iter_full_state, shard_model
from videorl.actor.lora import inject as inject_lora
from videorl.actor.ulysses import install_sequence_parallel
from videorl.devices import load_device, local_device, release_cached_memory, use_fast_attention

if TYPE_CHECKING:
    from videorl.actor.policy import Actor
    from videorl.backend import ModelBackend, VisionSync
    from videorl.config import TrainConfig
    from videorl.parallel import Parallel


def make_actor(
    config: TrainConfig, backend: ModelBackend, dist: Parallel, *, reference: bool | None = None
) -> tuple[Actor, VisionSync]:
    """The policy of this rank (FSDP2-sharded over ``dist``), its AdamW, and the frozen reference
    copy when ``reference`` (default: when the KL penalty is on; never with LoRA, whose reference is
    the actor with its adapters off)."""
    import torch

    from videorl.actor.policy import Actor

    dtype, device = getattr(torch, config.model.dtype), local_device()
    sharded = dist.world_size > 1
    # Master weights and optimizer states stay float32 (an lr of 1e-6 cannot move a bf16 weight);
    # model.dtype is the compute dtype: autocast in one process, FSDP2's mixed precision when sharded.
    # Sharded, rank 0 reads the model into host memory and the others build it on meta; each FSDP
    # unit moves to the device as it is sharded (fully_shard) and rank 0 sends every rank its shards,
    # so a GPU never holds more than one unit's full float32 weights (the whole float32 model on each
    # GPU first, 33 GB at 7B, leaves vLLM too little to start) and the checkpoint is read once.
    # With LoRA the base never moves: it stays in model.dtype, frozen; only the float32 adapters train.
    lora = config.actor.lora.enabled
    model = backend.load_model(
        dtype=dtype if lora else torch.float32,
        device=load_device(dist.rank) if sharded else device,
    )
    adapters = inject_lora(model, config.actor.lora) if lora else None  # before sharding: they shard along
    initial = dict(model.state_dict()) if sharded and dist.rank == 0 else {}
    use_fast_attention(model, dtype)
    if config.actor.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ref_model = None  # with LoRA the reference is the actor with its adapters off: no copy
    if (config.algorithm.use_kl_loss if reference is None else reference) and adapters is None:
        ref_model = load_reference(config, backend, device=load_device(dist.rank) if sharded else None)
    if dist.sp_size > 1:  # Ulysses: this rank's 1/k of every packed row (videorl.actor.ulysses)
        for policy in (model, ref_model) if ref_model is not None else (model,):
            install_sequence_parallel(policy, backend, dist.sp_group, dist.sp_size, dist.sp_rank)
    vision_sync = backend.install_vision_sync(model)
    # The zero-weighted dummy vision forward keeps FSDP ranks in step when one has no pixels; one
    # process needs none (and the HF engine, generating with the actor, would run it every token).
    vision_sync.dummy = sharded
    if sharded:
        shard_model(model, compute_dtype=dtype)
        fill_from_rank0(model, initial)
        del initial
        if ref_model is not None:  # sharded too: its forward is a collective, so it needs the dummy as well
            ref_initial = dict(ref_model.state_dict()) if dist.rank == 0 else {}
            backend.install_vision_sync(ref_model).dummy = True
            shard_model(ref_model, compute_dtype=dtype)
            fill_from_rank0(ref_model, ref_initial)
            del ref_initial
        release_cached_memory()  # the blocks sharding freed, for the engine about to start
    o = config.optim
    optimizer = torch.optim.AdamW(
        model.parameters() if adapters is None else adapters.parameters(),
        lr=o.lr,
        betas=(o.betas[0], o.betas[1]),
        eps=o.eps,
        weight_decay=o.weight_decay,
        **fused_adamw_options(device),
    )
    actor = Actor(
        model,
        optimizer,
        backend,
        ref_model,
        compute_dtype=None if sharded else dtype,
        full_state=functools.partial(iter_full_state, model) if sharded else None,
        lora=adapters,
    )
    return actor, vision_sync


def fused_adamw_options(device: Any) -> dict[str, Any]:
    """``fused=True`` on CUDA (one kernel for all parameters instead of a loop of small ones); the
    default implementation elsewhere (CPU results stay those of the tests)."""
    return {"fused": True} if getattr(device, "type", str(device)) == "cuda" else {}


def load_reference(config: TrainConfig, backend: ModelBackend, *, device: Any = None) -> Any:
    """The frozen reference policy (the base checkpoint) in ``model.dtype``, for the KL penalty, on
    ``device`` (None: this process's accelerator; to be sharded: see :func:`make_actor`)."""
    import torch

    dtype = getattr(torch, config.model.dtype)
    device = local_device() if device is None else device
    model = backend.load_model(dtype=dtype, device=device).eval().requires_grad_(False)
    use_fast_attention(model, dtype)
    return model
