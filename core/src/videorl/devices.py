"""Where this process computes: its device, the attention kernel, cached memory."""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

log = logging.getLogger("videorl.devices")

#: the warnings this process gave already (each is given once)
_WARNED: set[str] = set()


def local_device() -> torch.device:
    """This process's accelerator (``cuda:LOCAL_RANK`` under torchrun) or the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def load_device(rank: int) -> torch.device:
    """Where a rank builds a model it will shard: rank 0 reads the weights into host memory, the
    other ranks build the architecture alone on ``meta`` and receive their shards
    (:func:`fill_from_rank0`), so a node reads the checkpoint once, not once per GPU."""
    return torch.device("cpu" if rank == 0 else "meta")


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
    warn_windowed_vision_on_sdpa(model)


def warn_windowed_vision_on_sdpa(model: Any) -> None:
    """Warn once per process when a vision tower with windowed attention (``vision_config.window_size``:
    Qwen2.5-VL) runs on a GPU without a variable-length kernel: sdpa then loops over the windows,
    ~1,600 per 128-frame video and layer, ~44,800 small attention calls per forward of the 7B."""
    vision = getattr(getattr(model, "config", None), "vision_config", None)
    window = getattr(vision, "window_size", None)
    if not torch.cuda.is_available() or not window or "windowed-sdpa" in _WARNED:
        return
    if str(getattr(vision, "_attn_implementation", None) or "sdpa").startswith("flash_attention"):
        return
    _WARNED.add("windowed-sdpa")
    log.warning(
        "the vision tower's windowed attention runs on sdpa, one small call per window (~44,800 per "
        "forward of Qwen2.5-VL-7B on a 128-frame video; tens of minutes per step): install flash-attn "
        "(docs/install.md, 'flash-attn') so that it runs as one variable-length call per layer"
    )


def release_cached_memory() -> None:
    """Give the CUDA caching allocator's free blocks back to the device (a no-op without CUDA).

    The rollout engine runs in other processes (vLLM's engine core) and sees only what this process's
    allocator has returned: blocks freed by the update, a gather or the sharding stay reserved here
    until this call, and vLLM's free-memory check at start-up and at each wake-up would fail."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
