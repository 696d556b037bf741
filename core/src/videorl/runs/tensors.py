"""Tensor files and RNG states of a run: safetensors files with tied tensors stored once (and tied again
when read), and the python/numpy/torch RNG states as JSON-ready values."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.atomic import atomic_write, fsync_file
from videorl.runs.manifest import CheckpointError

if TYPE_CHECKING:
    import torch

_ALIASES_KEY = "videorl.aliases"

__all__ = [
    "capture_rng_state",
    "dedupe",
    "load_tensors",
    "read_tensor_file",
    "restore_rng_state",
    "save_tensors",
    "split_aliases",
    "write_tensor_file",
]


def capture_rng_state() -> dict[str, Any]:
    """The python, numpy and torch (CPU and CUDA) global RNG states, as JSON-ready values."""
    import numpy as np
    import torch

    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    cuda = []
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        # this process's device only (each rank has its entry): all visible devices would tie the
        # checkpoint to their count, 8 under torchrun but 1 in a Ray worker
        cuda = [torch.cuda.get_rng_state().tolist()]
    return {
        "python": [version, list(internal), gauss],
        "numpy": [name, np.asarray(keys).tolist(), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state().tolist(),
        "cuda": cuda,
    }


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Set the global RNGs to a state from :func:`capture_rng_state`."""
    import numpy as np
    import torch

    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    cuda = state.get("cuda") or []
    if cuda and torch.cuda.is_available():
        if len(cuda) == 1:  # this process's device
            torch.cuda.set_rng_state(torch.tensor(cuda[0], dtype=torch.uint8))
        elif len(cuda) == torch.cuda.device_count():  # written with every visible device's state
            torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in cuda])
        else:
            raise CheckpointError(
                f"the checkpoint holds RNG states of {len(cuda)} CUDA devices, this process sees "
                f"{torch.cuda.device_count()}"
            )


def _view_key(value: Any) -> tuple[Any, ...] | None:
    """What identifies the memory of a tensor (a DTensor: its local shard); None for an empty one."""
    from torch.distributed.tensor import DTensor

    local = value.to_local() if isinstance(value, DTensor) else value
    if local.numel() == 0:
        return None
    ptr = local.untyped_storage().data_ptr()
    return (ptr, local.storage_offset(), tuple(local.shape), tuple(local.stride()), local.dtype)


def split_aliases(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``state`` with each tied tensor once, and ``{alias: stored name}`` for its other names; another
    view of a storage already kept (or a non-contiguous plain tensor) is stored as a copy."""
    import torch
    from torch.distributed.tensor import DTensor

    kept: dict[str, Any] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple[Any, ...], str] = {}
    storages: set[int] = set()
    for name, value in state.items():
        key = _view_key(value) if isinstance(value, torch.Tensor) else None
        if key is not None and key in seen:
            aliases[name] = seen[key]
            continue
        if key is not None and not isinstance(value, DTensor):
            shared = key[0] in storages or not value.is_contiguous()
            value = value.detach().clone() if shared else value.detach()
        kept[name] = value
        if key is not None:
            seen[key] = name
            storages.add(key[0])
    return kept, aliases


def dedupe(state: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """CPU tensors with each shared one stored once, and ``{alias: stored name}`` for the others."""
    kept, aliases = split_aliases({name: value.detach().cpu() for name, value in state.items()})
    return {name: value.contiguous() for name, value in kept.items()}, aliases


def save_tensors(path: Path, state: Mapping[str, torch.Tensor], dtype: torch.dtype | None = None) -> None:
    """A safetensors file of ``state``, tied tensors once under their first name (as ``save_pretrained``),
    floating tensors in ``dtype`` when given (cast after the ties are found, so they stay one tensor)."""
    from safetensors.torch import save_file

    tensors, _ = dedupe(state)
    if dtype is not None:
        tensors = {name: t.to(dtype) if t.is_floating_point() else t for name, t in tensors.items()}
    save_file(tensors, str(path), metadata={"format": "pt"})
    fsync_file(path)


def write_tensor_file(
    path: Path | str, state: Mapping[str, torch.Tensor], metadata: Mapping[str, str]
) -> None:
    """Write ``state`` atomically as a safetensors file with ``metadata``, each tied tensor stored once and
    its other names kept in the metadata (:func:`read_tensor_file` gives them back)."""
    from safetensors.torch import save_file

    kept, aliases = dedupe(state)
    header = {"format": "pt", _ALIASES_KEY: json.dumps(aliases), **metadata}
    atomic_write(path, lambda tmp: save_file(kept, str(tmp), metadata=header))


def read_tensor_file(path: Path | str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """A safetensors file's tensors, tied names pointing to one tensor again, and its metadata."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
        state = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 - not a dict
    for alias, name in json.loads(metadata.get(_ALIASES_KEY, "{}")).items():
        state[alias] = state[name]
    return state, metadata


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    """A format-1 ``model.safetensors`` (its tied names, kept in the metadata, point to one tensor)."""
    from safetensors import SafetensorError

    try:
        state, _ = read_tensor_file(path)
    except (SafetensorError, ValueError, KeyError, AttributeError) as exc:
        raise CheckpointError(f"{path} is corrupt: not a readable safetensors file ({exc})") from None
    return state
