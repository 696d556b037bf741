"""Checkpoints of a training run: written atomically, resumed from the last complete one, exported to HF.

Layout under ``<output_dir>/checkpoints``::

    step_000020/
        model.safetensors   model state dict (tied tensors stored once, their other names in metadata)
        optimizer.pt        optimizer state dict (torch.save; read back with weights_only=True)
        rng.json            python/numpy/torch RNG states, one entry per rank
        state.json          step, data position, extra fields, and the size of every file (written last)
    latest                  the name of the newest checkpoint (a convenience; resuming scans instead)

A checkpoint is written into a hidden temporary directory, every file fsynced, then renamed into
place; ``latest`` is replaced after that. A writer killed at any point leaves either no checkpoint
for that step or a complete one: ``resume="auto"`` takes the highest step whose ``state.json`` lists
files that all exist with their recorded sizes, and ignores temporary directories (removed by the
next save). Only one process (rank 0) writes; gather full state dicts first.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.atomic import atomic_write_text, fsync_dir, fsync_file
from videorl.errors import VideorlError

if TYPE_CHECKING:
    import torch

FORMAT_VERSION = 1
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng.json"
STATE_FILE = "state.json"
LATEST_FILE = "latest"
_STEP_DIR = re.compile(r"^step_(\d+)$")
_ALIASES_KEY = "videorl.aliases"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".msgpack", ".h5", ".gguf")

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "CheckpointManager",
    "capture_rng_state",
    "checkpoint_due",
    "export_hf_model",
    "restore_rng_state",
]


class CheckpointError(VideorlError):
    """A checkpoint is missing, incomplete or unreadable (the message names it and what to do)."""


def checkpoint_due(step: int, every: int, last_step: int) -> bool:
    """Whether to write a checkpoint after ``step``: every ``every`` steps (0: never) and after the last."""
    return step == last_step or (every > 0 and step % every == 0)


# --- RNG ------------------------------------------------------------------------------------------


def capture_rng_state() -> dict[str, Any]:
    """The python, numpy and torch (CPU and CUDA) global RNG states, as JSON-ready values."""
    import numpy as np
    import torch

    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    cuda = []
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        cuda = [s.tolist() for s in torch.cuda.get_rng_state_all()]
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
        if len(cuda) != torch.cuda.device_count():
            raise CheckpointError(
                f"the checkpoint holds RNG states of {len(cuda)} CUDA devices, this process sees "
                f"{torch.cuda.device_count()}"
            )
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in cuda])


# --- tensors --------------------------------------------------------------------------------------


def _dedupe(state: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """CPU tensors with each shared one stored once, and ``{alias: stored name}`` for the others."""
    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple[Any, ...], str] = {}
    storages: set[int] = set()
    for name, value in state.items():
        tensor = value.detach().cpu()
        if tensor.numel() == 0:
            tensors[name] = tensor.contiguous()
            continue
        ptr = tensor.untyped_storage().data_ptr()
        view = (ptr, tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)
        if view in seen:
            aliases[name] = seen[view]
            continue
        # a different view of a storage already stored (or a non-contiguous view): store a copy
        shared = ptr in storages
        tensors[name] = tensor.clone() if shared else tensor.contiguous()
        seen[view] = name
        storages.add(ptr)
    return tensors, aliases


def _save_tensors(path: Path, state: Mapping[str, torch.Tensor], *, keep_aliases: bool) -> None:
    from safetensors.torch import save_file

    tensors, aliases = _dedupe(state)
    metadata = {"format": "pt"}
    if keep_aliases and aliases:
        metadata[_ALIASES_KEY] = json.dumps(aliases, sort_keys=True)
    save_file(tensors, str(path), metadata=metadata)
    fsync_file(path)


def _load_tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import safe_open
    from safetensors.torch import load_file

    state = load_file(str(path))
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
    for alias, name in json.loads(metadata.get(_ALIASES_KEY, "{}")).items():
        state[alias] = state[name]
    return state


# --- checkpoints ----------------------------------------------------------------------------------


@dataclass
class Checkpoint:
    """A complete checkpoint on disk; tensors are read when asked for."""

    path: Path
    step: int
    data_state: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def model_state(self) -> dict[str, torch.Tensor]:
        """The model state dict (tied names point to one tensor again)."""
        return _load_tensors(self.path / MODEL_FILE)

    def optimizer_state(self, map_location: str | torch.device = "cpu") -> dict[str, Any] | None:
        """The optimizer state dict (``None`` when it was not saved), loaded with ``weights_only=True``."""
        import pickle

        import torch

        path = self.path / OPTIMIZER_FILE
        if not path.exists():
            return None
        try:
            state: dict[str, Any] = torch.load(path, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as exc:
            raise CheckpointError(
                f"{path}: refused to load the optimizer state: it holds objects other than tensors and "
                f"plain containers ({exc}). Only load checkpoints you trust, written by videorl."
            ) from exc
        return state

    def rank_data_states(self, world_size: int, advice: str) -> list[dict[str, Any]]:
        """The data position of each rank that wrote this checkpoint; a :class:`ConfigError` unless they
        are ``world_size`` (``advice``, formatted with ``n`` the count written, says how to resume)."""
        from videorl.errors import ConfigError

        ranks: list[dict[str, Any]] = self.data_state.get("ranks", [])
        if len(ranks) != world_size:
            raise ConfigError(
                f"{self.path} was written by {len(ranks)} rank(s); resume it with {advice.format(n=len(ranks))} "
                f"(now {world_size})"
            )
        return ranks

    def rng_state(self, rank: int = 0) -> dict[str, Any] | None:
        """The RNG state saved for ``rank`` (``None`` when none was saved)."""
        path = self.path / RNG_FILE
        if not path.exists():
            return None
        ranks: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))["ranks"]
        if rank >= len(ranks):
            raise CheckpointError(
                f"{path} holds RNG states of {len(ranks)} ranks, rank {rank} asked: resume with the "
                "same number of processes"
            )
        return ranks[rank]


def _read_manifest(path: Path) -> dict[str, Any]:
    """The ``state.json`` of a checkpoint directory, after checking that every listed file is whole."""
    match = _STEP_DIR.match(path.name)
    if match is None:
        raise CheckpointError(f"{path} is not a checkpoint directory (expected a name like step_000020)")
    try:
        manifest: dict[str, Any] = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} is incomplete: it has no {STATE_FILE} (written last)") from None
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}/{STATE_FILE} is unreadable: {exc}") from exc
    if manifest.get("format") != FORMAT_VERSION or manifest.get("step") != int(match.group(1)):
        raise CheckpointError(
            f"{path}/{STATE_FILE} does not describe this checkpoint (format or step differ)"
        )
    for name, size in manifest.get("files", {}).items():
        try:
            actual = (path / name).stat().st_size
        except FileNotFoundError:
            raise CheckpointError(f"{path} is incomplete: {name} is missing") from None
        if actual != size:
            raise CheckpointError(f"{path} is damaged: {name} has {actual} bytes, {size} were written")
    return manifest


class CheckpointManager:
    """Writes, finds, prunes and loads the checkpoints under ``root``."""

    def __init__(self, root: str | Path, *, keep_last: int = 0) -> None:
        self.root = Path(root)
        self.keep_last = keep_last

    def path_for(self, step: int) -> Path:
        return self.root / f"step_{step:06d}"

    def save(
        self,
        step: int,
        *,
        model_state: Mapping[str, torch.Tensor],
        optimizer_state: Mapping[str, Any] | None = None,
        data_state: Mapping[str, Any] | None = None,
        rng: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write the checkpoint of ``step`` atomically, point ``latest`` at it, and prune old ones.

        ``data_state`` and ``extra`` must be JSON-serialisable; ``rng`` is one state of
        :func:`capture_rng_state` or one per rank.
        """
        import torch

        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        try:
            data_json = json.loads(json.dumps(dict(data_state or {})))
            extra_json = json.loads(json.dumps(dict(extra or {})))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"data_state and extra must be JSON-serialisable: {exc}") from exc
        self.root.mkdir(parents=True, exist_ok=True)
        self._remove_leftovers()
        final = self.path_for(step)
        tmp = self.root / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        _save_tensors(tmp / MODEL_FILE, model_state, keep_aliases=True)
        if optimizer_state is not None:
            with open(tmp / OPTIMIZER_FILE, "wb") as f:
                torch.save(dict(optimizer_state), f)
                f.flush()
                os.fsync(f.fileno())
        if rng is not None:
            ranks = [dict(rng)] if isinstance(rng, Mapping) else [dict(r) for r in rng]
            self._write_json(tmp / RNG_FILE, {"ranks": ranks})
        files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}
        manifest = {
            "format": FORMAT_VERSION,
            "step": step,
            "files": files,
            "data": data_json,
            "extra": extra_json,
        }
        self._write_json(tmp / STATE_FILE, manifest)
        fsync_dir(tmp)
        if final.exists():  # the same step written again (after resuming from an earlier one)
            self._delete(final)
        os.rename(tmp, final)
        fsync_dir(self.root)
        self._write_pointer(final.name)
        self.prune()
        return final

    @staticmethod
    def _write_json(path: Path, value: Any) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(value, f)
            f.flush()
            os.fsync(f.fileno())

    def _write_pointer(self, name: str) -> None:
        atomic_write_text(self.root / LATEST_FILE, name + "\n")

    def _delete(self, path: Path) -> None:
        """Remove a checkpoint so that a kill half-way never leaves a directory that looks complete."""
        trash = self.root / f".trash-{path.name}-{uuid.uuid4().hex[:8]}"
        os.rename(path, trash)
        fsync_dir(self.root)
        shutil.rmtree(trash, ignore_errors=True)

    def _remove_leftovers(self) -> None:
        """Temporary and trash directories of writers that were killed."""
        for pattern in (".tmp-*", ".trash-*"):
            for path in self.root.glob(pattern):
                shutil.rmtree(path, ignore_errors=True)

    def complete(self) -> list[Path]:
        """The complete checkpoints, oldest first (incomplete or foreign directories are skipped)."""
        if not self.root.is_dir():
            return []
        found = []
        for path in self.root.iterdir():
            if not path.is_dir() or not _STEP_DIR.match(path.name):
                continue
            try:
                manifest = _read_manifest(path)
            except CheckpointError:
                continue
            found.append((manifest["step"], path))
        return [path for _, path in sorted(found)]

    def latest(self) -> Path | None:
        """The complete checkpoint with the highest step, or ``None``."""
        complete = self.complete()
        return complete[-1] if complete else None

    def prune(self) -> None:
        """Keep the newest ``keep_last`` complete checkpoints (all when 0)."""
        if self.keep_last <= 0:
            return
        for path in self.complete()[: -self.keep_last]:
            self._delete(path)

    def resolve_resume(self, spec: str | None) -> Path | None:
        """The checkpoint to resume from: ``None``/``"none"``: none; ``"auto"``: the latest complete one
        (``None`` when there is none yet); otherwise a checkpoint directory, which must be complete."""
        if spec is None or spec.strip().lower() in ("", "none", "null", "never"):
            return None
        if spec.strip().lower() == "auto":
            return self.latest()
        path = Path(spec)
        _read_manifest(path)
        return path

    def load(self, path: str | Path) -> Checkpoint:
        """A complete checkpoint (raises :class:`CheckpointError` naming what is wrong otherwise)."""
        path = Path(path)
        manifest = _read_manifest(path)
        return Checkpoint(path, manifest["step"], manifest.get("data", {}), manifest.get("extra", {}))


# --- export ---------------------------------------------------------------------------------------


def export_hf_model(
    source: str | Path | Checkpoint | Mapping[str, torch.Tensor],
    base_model_dir: str | Path,
    out_dir: str | Path,
    *,
    overwrite: bool = False,
) -> Path:
    """Write a plain HF model directory: the base model's config, tokenizer and processor files with
    the weights of ``source`` (a checkpoint, its directory, or a state dict) as ``model.safetensors``.

    Tied tensors are written once, under their first name, as ``save_pretrained`` does. The directory
    appears atomically.
    """
    base, out = Path(base_model_dir), Path(out_dir)
    if not (base / "config.json").is_file():
        raise CheckpointError(f"{base} is not a model directory: it has no config.json")
    if out.exists() and not overwrite:
        raise CheckpointError(f"{out} already exists; choose another directory or pass overwrite=True")
    if isinstance(source, (str, Path)):
        source = CheckpointManager(Path(source).parent).load(source)
    state = source.model_state() if isinstance(source, Checkpoint) else source
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".tmp-{out.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        for item in sorted(base.iterdir()):
            name = item.name
            is_weight = name.endswith(_WEIGHT_SUFFIXES) or name.endswith(
                tuple(f"{s}.index.json" for s in _WEIGHT_SUFFIXES)
            )
            if item.is_file() and not is_weight and not name.startswith("."):
                shutil.copy2(item, tmp / name)
                fsync_file(tmp / name)
        _save_tensors(tmp / MODEL_FILE, state, keep_aliases=False)
        fsync_dir(tmp)
        if out.exists():
            trash = out.parent / f".trash-{out.name}-{uuid.uuid4().hex[:8]}"
            os.rename(out, trash)
            shutil.rmtree(trash, ignore_errors=True)
        os.rename(tmp, out)
        fsync_dir(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
