"""Checkpoints of a training run: sharded, written atomically (in the background), resumed from the last
complete one, exported to HF.

Layout under ``<output_dir>/checkpoints``::

    step_000020/
        tensors/            a torch.distributed.checkpoint (DCP) of {"model": ..., "optimizer": ...}:
            __0_0.distcp    the shards rank 0 wrote (under FSDP its shards of every parameter and
            __1_0.distcp    optimizer state; one file per rank), ...
            .metadata       which bytes of which file hold which piece of which tensor (rank 0)
        rng.json            python/numpy/torch RNG states, one entry per rank
        state.json          step, data positions, extra fields, the size and CRC-32 of every file and the
                            rank that wrote each shard (written last)
    latest                  the name of the newest checkpoint (a convenience; resuming scans instead)

Every rank writes its own shards and reads back its own (DCP plans which bytes each rank needs), so no
process ever holds the whole model or optimizer state, and one process (no process group) is rank 0 of
1. :func:`save_checkpoint` copies the states to host memory and returns; a background thread writes
them, then rank 0 writes ``state.json`` and renames the directory into place: a checkpoint is complete,
and ``latest`` names it, only once every rank's files are on disk. The next save (or
``CheckpointManager.wait``) waits for the one in flight and raises what it failed with.

A checkpoint is written into a hidden temporary directory, every file fsynced, then renamed into
place. A writer killed at any point (or a full disk) leaves either no checkpoint for that step or a
complete one: ``resume="auto"`` takes the highest step whose ``state.json`` lists files that all exist
with their recorded sizes and checksums, logs each one it skips, and ignores temporary directories
(removed by the next save). Under a process group each rank checks the checksums of the files it reads
(its own shards and the shared small files), and the ranks agree on the checkpoint they resume from.

Nothing read back is unpickled beyond plain data: DCP's ``.metadata`` is a pickle, read with an
unpickler that accepts only DCP's own metadata classes, and its non-tensor values (the optimizer's
``param_groups``) with ``torch.load(weights_only=True)`` (:mod:`videorl.runs.dcp_files`); both after
their checksums matched.

``export_hf_model`` writes a folder marked as an export (:data:`EXPORT_MARKER`); only such a folder is
ever replaced, and never one that holds, or is held by, the run or the base model.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
import uuid
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.atomic import (
    DiskFullError,
    atomic_write,
    atomic_write_text,
    disk_full,
    fsync_dir,
    fsync_file,
    is_disk_full,
)
from videorl.errors import ConfigError, VideorlError
from videorl.runs.dcp_files import quiet_single_process, recording_writer, safe_planner, safe_reader
from videorl.runs.records import CONFIG_FILE

if TYPE_CHECKING:
    import torch
    from torch.distributed.checkpoint.stateful import Stateful

    from videorl.config import TrainConfig
    from videorl.parallel import Parallel

log = logging.getLogger("videorl.checkpoint")

FORMAT_VERSION = 2
CHECKPOINT_DIR = "checkpoints"  # in a run directory
TENSORS_DIR = "tensors"
RNG_FILE = "rng.json"
STATE_FILE = "state.json"
LATEST_FILE = "latest"
#: format 1 (before sharding): the whole model and optimizer state, written by rank 0
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
#: the file that marks a folder written by :func:`export_hf_model` (the only kind ``overwrite`` replaces)
EXPORT_MARKER = ".videorl-export.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")
_SHARD = re.compile(r"^__(\d+)_\d+\.distcp$")
_ALIASES_KEY = "videorl.aliases"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".msgpack", ".h5", ".gguf")

__all__ = [
    "EXPORT_MARKER",
    "ActorState",
    "Checkpoint",
    "CheckpointError",
    "CheckpointManager",
    "agreed_checkpoint",
    "base_model_of",
    "capture_rng_state",
    "export_hf_model",
    "read_tensor_file",
    "resolve_checkpoint",
    "restore_rng_state",
    "resume",
    "run_config",
    "save_checkpoint",
    "write_tensor_file",
]


class CheckpointError(VideorlError):
    """A checkpoint is missing, incomplete or unreadable (the message names it and what to do)."""


# --- RNG ------------------------------------------------------------------------------------------


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


# --- tensors --------------------------------------------------------------------------------------


def _view_key(value: Any) -> tuple[Any, ...] | None:
    """What identifies the memory of a tensor (a DTensor: its local shard); None for an empty one."""
    from torch.distributed.tensor import DTensor

    local = value.to_local() if isinstance(value, DTensor) else value
    if local.numel() == 0:
        return None
    ptr = local.untyped_storage().data_ptr()
    return (ptr, local.storage_offset(), tuple(local.shape), tuple(local.stride()), local.dtype)


def _split_aliases(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
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


def _dedupe(state: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """CPU tensors with each shared one stored once, and ``{alias: stored name}`` for the others."""
    kept, aliases = _split_aliases({name: value.detach().cpu() for name, value in state.items()})
    return {name: value.contiguous() for name, value in kept.items()}, aliases


def _save_tensors(path: Path, state: Mapping[str, torch.Tensor], dtype: torch.dtype | None = None) -> None:
    """A safetensors file of ``state``, tied tensors once under their first name (as ``save_pretrained``),
    floating tensors in ``dtype`` when given (cast after the ties are found, so they stay one tensor)."""
    from safetensors.torch import save_file

    tensors, _ = _dedupe(state)
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

    kept, aliases = _dedupe(state)
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


def _load_tensors(path: Path) -> dict[str, torch.Tensor]:
    """A format-1 ``model.safetensors`` (its tied names, kept in the metadata, point to one tensor)."""
    from safetensors import SafetensorError

    try:
        state, _ = read_tensor_file(path)
    except (SafetensorError, ValueError, KeyError, AttributeError) as exc:
        raise CheckpointError(f"{path} is corrupt: not a readable safetensors file ({exc})") from None
    return state


def _crc32(path: Path) -> str:
    """The CRC-32 of a file, read in 16 MiB blocks (about 7 GB/s)."""
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            crc = zlib.crc32(block, crc)
    return f"crc32:{crc:08x}"


def _process_rank() -> int | None:
    """This process's rank in its process group, or None outside one (it then reads, and checks, all)."""
    import sys

    if "torch.distributed" not in sys.modules:  # never joined a group: do not import torch for that
        return None
    import torch.distributed as tdist

    return tdist.get_rank() if tdist.is_available() and tdist.is_initialized() else None


# --- checkpoints ----------------------------------------------------------------------------------


@dataclass
class Checkpoint:
    """A complete checkpoint on disk; tensors are read when asked for."""

    path: Path
    step: int
    data_state: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    format: int = FORMAT_VERSION
    aliases: dict[str, str] = field(default_factory=dict)  # tied names: {alias: stored name}

    def model_state(self) -> dict[str, torch.Tensor]:
        """The whole model state dict in host memory, in one process (tied names point to one tensor)."""
        if self.format == 1:
            return _load_tensors(self.path / MODEL_FILE)
        state: dict[str, torch.Tensor] = self._read_whole("model") or {}
        for alias, name in self.aliases.items():
            state[alias] = state[name]
        return state

    def optimizer_state(self) -> dict[str, Any] | None:
        """The whole optimizer state dict (``None`` when none was saved), in one process."""
        self.require_sharded("its optimizer state")
        return self._read_whole("optimizer")

    def _read_whole(self, key: str) -> Any:
        """Entry ``key`` of the DCP checkpoint, whole, rebuilt from its metadata (no process group)."""
        from torch.distributed.checkpoint.api import CheckpointException
        from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

        tensors = self.path / TENSORS_DIR
        try:
            reader = safe_reader(tensors)
            if not any(
                k == key or k.startswith(f"{key}.") for k in reader.read_metadata().state_dict_metadata
            ):
                return None
            state: dict[str, Any] = {}
            # the public dcp.load fills only keys already in the dict; this is its loader
            quiet_single_process()
            _load_state_dict(state, storage_reader=reader, planner=safe_planner(empty=True, keys={key}),
                             no_dist=True)  # fmt: skip
        except FileNotFoundError:
            raise CheckpointError(f"{self.path} is incomplete: {TENSORS_DIR}/ is missing") from None
        except (Exception, CheckpointException) as exc:
            raise _read_error(tensors, exc) from None
        return state[key]

    def load_into(self, state: Stateful, dist: Parallel, group: Any = None) -> None:
        """Read this checkpoint's tensors into ``state`` (a collective over ``group``, default the
        default group: each rank reads its shards)."""
        from torch.distributed.checkpoint import load
        from torch.distributed.checkpoint.api import CheckpointException

        self.require_sharded("it")
        template = state.state_dict()
        model = template.get("model", {})
        for alias in self.aliases:
            model.pop(alias, None)
        tensors = self.path / TENSORS_DIR
        try:
            reader = safe_reader(tensors)
            stored = reader.read_metadata().state_dict_metadata
        except FileNotFoundError:
            raise CheckpointError(f"{self.path} is incomplete: {TENSORS_DIR}/.metadata is missing") from None
        except Exception as exc:
            raise _read_error(tensors, exc) from None
        # before DCP's "missing key" or size mismatch, which would read as a corrupt checkpoint
        self._require_layout(template, stored)
        try:
            quiet_single_process()
            load(template, storage_reader=reader, planner=safe_planner(empty=False),
                 process_group=group, no_dist=dist.world_size == 1)  # fmt: skip
        except (Exception, CheckpointException) as exc:
            raise _read_error(tensors, exc) from None
        for alias, name in self.aliases.items():
            model[alias] = model[name]
        state.load_state_dict(template)

    def _require_layout(self, template: dict[str, Any], stored: Mapping[str, Any]) -> None:
        """Raise :class:`CheckpointError` unless ``stored`` (the checkpoint's DCP metadata, by flattened
        key) holds exactly ``template``'s keys, tensors of the same shapes: a LoRA run resuming a full
        fine-tuning checkpoint, the reverse, or other ``actor.lora`` settings."""
        import torch
        from torch.distributed.checkpoint._nested_dict import flatten_state_dict
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        wanted, _ = flatten_state_dict(template)  # the keys DCP's planner reads, as it flattens them
        missing = sorted(set(wanted) - set(stored))
        unexpected = sorted(set(stored) - set(wanted))
        reshaped = [
            f"{key}: {list(stored[key].size)} in the checkpoint, {list(value.shape)} now"
            for key, value in sorted(wanted.items())
            if key in stored
            and isinstance(value, torch.Tensor)
            and isinstance(stored[key], TensorStorageMetadata)
            and tuple(stored[key].size) != tuple(value.shape)
        ]
        if not (missing or unexpected or reshaped):
            return
        parts = [
            f"{len(keys)} {what} ({_few(keys)})"
            for keys, what in (
                (missing, "key(s) of this run are not in it"),
                (unexpected, "key(s) of it are not in this run"),
                (reshaped, "tensor(s) have another shape"),
            )
            if keys
        ]
        raise CheckpointError(
            f"{self.path} does not match this run's model and optimizer: " + "; ".join(parts) + ". A LoRA "
            "run resumes only a checkpoint written with the same actor.lora settings (enabled, rank, "
            "target_modules), a full fine-tuning run only a full one: compare actor.lora with the "
            f"checkpoint run's {self.path.parent.parent / 'config.yaml'}, or start a new run"
        )

    def require_sharded(self, what: str) -> None:
        """Raise :class:`CheckpointError`, saying what to do, for a checkpoint of the unsharded format 1."""
        if self.format == 1:
            raise CheckpointError(
                f"{self.path} was written by an earlier videorl (format 1: one model.safetensors and "
                f"optimizer.pt); this version resumes only sharded checkpoints, so {what} cannot be read. "
                f"Export its model (`videorl export {self.path} OUT`) and start a new run from OUT "
                "(model.path=OUT; the optimizer state starts afresh)"
            )

    def rank_data_states(self, world_size: int, advice: str) -> list[dict[str, Any]]:
        """The data position of each rank that wrote this checkpoint; a :class:`ConfigError` unless they
        are ``world_size`` (``advice``, formatted with ``n`` the count written, says how to resume)."""

        ranks: list[dict[str, Any]] = self.data_state.get("ranks", [])
        if len(ranks) != world_size:
            raise ConfigError(
                f"{self.path} was written by {len(ranks)} rank(s); resume it with "
                f"{advice.format(n=len(ranks))} "
                f"(now {world_size})"
            )
        return ranks

    def rng_state(self, rank: int = 0) -> dict[str, Any] | None:
        """The RNG state saved for ``rank`` (``None`` when none was saved)."""
        path = self.path / RNG_FILE
        if not path.exists():
            return None
        try:
            ranks: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))["ranks"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{path} is corrupt ({type(exc).__name__}: {exc})") from None
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
    if manifest.get("format") not in (1, FORMAT_VERSION) or manifest.get("step") != int(match.group(1)):
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


def _check_contents(path: Path, manifest: dict[str, Any], rank: int | None) -> None:
    """Raise :class:`CheckpointError` unless every file of checkpoint ``path`` that ``rank`` reads (None:
    all) has its recorded CRC-32: its own shards and the small shared files, not other ranks' shards
    (for format-1 checkpoints written before checksums: a readable safetensors header and torch archive)."""
    from safetensors import SafetensorError, safe_open

    checksums: dict[str, str] = manifest.get("checksums", {})
    writers: dict[str, int] = manifest.get("writers", {})
    for name, expected in checksums.items():
        if rank is not None and writers.get(name, rank) != rank:
            continue
        if _crc32(path / name) != expected:
            raise CheckpointError(
                f"{path} is corrupt: {name} does not match its checksum (same size, other bytes)"
            )
    if checksums:
        return
    try:
        with safe_open(str(path / MODEL_FILE), framework="pt") as f:
            f.metadata()
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(
            f"{path} is corrupt: {MODEL_FILE} is not a readable safetensors file ({exc})"
        ) from None
    optimizer = path / OPTIMIZER_FILE
    if optimizer.exists() and not zipfile.is_zipfile(optimizer):
        raise CheckpointError(f"{path} is corrupt: {OPTIMIZER_FILE} is not a readable torch.save archive")


class CheckpointManager:
    """Writes, finds, prunes and loads the checkpoints under ``root``; one write may be in flight."""

    def __init__(self, root: str | Path, *, keep_last: int = 0) -> None:
        self.root = Path(root)
        self.keep_last = keep_last
        self._reported: set[str] = set()  # skipped checkpoints already logged (one line each)
        self._verified: set[Path] = set()  # checkpoints whose contents matched their checksums
        self._pending: Future[Path] | None = None  # the write in flight
        self._writer: ThreadPoolExecutor | None = None  # the thread that finishes background writes
        self._group: Any = None  # the gloo group of this manager's collectives (multi-process runs)

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
        """Write the checkpoint of ``step`` from whole state dicts, in this process alone, and wait for it.

        ``data_state`` and ``extra`` must be JSON-serialisable; ``rng`` is one state of
        :func:`capture_rng_state` or one per rank. DCP stores dict keys as strings: an optimizer state
        reads back as it is written only keyed by parameter name (``get_optimizer_state_dict``, as
        :class:`ActorState` gives it), not by ``Optimizer.state_dict``'s integers.
        """
        from videorl.parallel import Parallel

        tensors: dict[str, Any] = {"model": dict(model_state)}
        if optimizer_state is not None:
            tensors["optimizer"] = dict(optimizer_state)
        ranks = None if rng is None else [dict(rng)] if isinstance(rng, Mapping) else [dict(r) for r in rng]
        self.write(step, tensors, Parallel(), data=data_state, rng=ranks, extra=extra, asynchronous=False)
        return self.path_for(step)

    def write(
        self,
        step: int,
        tensors: dict[str, Any],
        dist: Parallel,
        *,
        data: Mapping[str, Any] | None = None,
        rng: Sequence[Mapping[str, Any]] | None = None,
        extra: Mapping[str, Any] | None = None,
        asynchronous: bool = True,
    ) -> None:
        """Write the checkpoint of ``step``: ``tensors`` (``{"model": ..., "optimizer": ...}``, this
        rank's shards or whole tensors) by every rank of ``dist`` (a collective), ``data``, ``rng`` (one
        state per rank) and ``extra`` by rank 0. ``asynchronous``: return once the tensors are staged in
        host memory; the checkpoint becomes complete when the background write ends (:meth:`wait`)."""
        import torch.distributed.checkpoint as dcp

        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        try:
            data_json = json.loads(json.dumps(dict(data or {})))
            extra_json = json.loads(json.dumps(dict(extra or {})))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"data_state and extra must be JSON-serialisable: {exc}") from exc
        self.wait()
        group = self.process_group(dist)
        tmp = self.root / f".tmp-{self.path_for(step).name}"
        if dist.rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            self._remove_leftovers()
            tmp.mkdir()
        dist.barrier()
        model, aliases = _split_aliases(tensors.get("model", {}))
        tensors = {**tensors, "model": model}
        manifest = {"format": FORMAT_VERSION, "step": step, "world_size": dist.world_size,
                    "aliases": aliases, "data": data_json, "extra": extra_json}  # fmt: skip
        ranks = [dict(r) for r in rng] if rng is not None else None
        writer, errors = recording_writer(tmp / TENSORS_DIR)
        single = dist.world_size == 1
        try:
            quiet_single_process()
            if not asynchronous:
                dcp.save(tensors, storage_writer=writer, process_group=group, no_dist=single)
                self._finish(step, tmp, dist, group, manifest, ranks, errors)
                return
            staged = dcp.async_save(tensors, storage_writer=writer, process_group=group, no_dist=single)
        except BaseException as exc:
            raise self._failed(step, tmp, dist.rank, exc, errors) from exc
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="videorl-checkpoint")
        written = staged if isinstance(staged, Future) else staged.upload_completion
        self._pending = self._writer.submit(
            self._finish, step, tmp, dist, group, manifest, ranks, errors, written
        )

    def wait(self) -> None:
        """Wait for the write in flight (if any) to finish; raise what it failed with."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def process_group(self, dist: Parallel) -> Any:
        """The gloo group of this manager's collectives in a multi-process run, made at first use (a
        collective; None: one process). A background write's collectives must not mix with the
        training loop's, and a load's (plans, metadata: CPU objects) need no accelerator."""
        if dist.world_size == 1:
            return None
        if self._group is None:
            import torch.distributed as tdist

            from videorl.parallel import COLLECTIVE_TIMEOUT

            self._group = tdist.new_group(backend="gloo", timeout=COLLECTIVE_TIMEOUT)
        return self._group

    def _finish(
        self,
        step: int,
        tmp: Path,
        dist: Parallel,
        group: Any,
        manifest: dict[str, Any],
        rng: list[dict[str, Any]] | None,
        errors: list[OSError],
        written: Future[Any] | None = None,
    ) -> Path:
        """Once every rank's tensors are written (``written``: the background write, waited for here),
        each rank checksums its own files, and rank 0 writes the RNG states and ``state.json`` and
        renames the directory into place (then prunes)."""
        final = self.path_for(step)
        try:
            if written is not None:
                written.result()
            failure: BaseException | None = None
            try:
                own = {name: [size, crc] for name, size, crc in self._own_files(tmp, dist.rank)}
            except Exception as exc:  # gathered all the same: the other ranks would wait in the gather
                own, failure = {}, exc
            mine = (own, None if failure is None else f"{type(failure).__name__}: {failure}")
            gathered = [mine] if group is None else _gather(mine, dist.world_size, group)
            failed = [(rank, reason) for rank, (_, reason) in enumerate(gathered) if reason is not None]
            if failed:
                raise CheckpointError(
                    f"the checkpoint of step {step} was not completed: "
                    + "; ".join(
                        f"rank {rank} could not flush and checksum its files: {r}" for rank, r in failed
                    )
                ) from failure
            records = [files for files, _ in gathered]
            error = None
            if dist.rank == 0:
                try:
                    self._commit(final, tmp, manifest, records, rng)
                except BaseException as exc:
                    error = exc
            if group is not None:  # every rank learns whether the checkpoint is there
                import torch.distributed as tdist

                status = [None if error is None else f"{type(error).__name__}: {error}"]
                tdist.broadcast_object_list(status, src=0, group=group)
                if status[0] is not None and error is None:
                    raise CheckpointError(
                        f"rank 0 could not complete the checkpoint of step {step}: {status[0]}"
                    )
            if error is not None:
                raise error
        except BaseException as exc:
            raise self._failed(step, tmp, dist.rank, exc, errors) from exc
        return final

    @staticmethod
    def _own_files(tmp: Path, rank: int) -> list[tuple[str, int, str]]:
        """The files ``rank`` wrote into the checkpoint being written, fsynced, with sizes and CRCs (an
        ``OSError`` names the file: ``fsync``'s own names none)."""
        out = []
        tensors = tmp / TENSORS_DIR
        path = tensors
        try:
            for path in sorted(tensors.iterdir()):
                shard = _SHARD.match(path.name)
                if (shard is not None and int(shard.group(1)) == rank) or (rank == 0 and shard is None):
                    fsync_file(path)
                    out.append((f"{TENSORS_DIR}/{path.name}", path.stat().st_size, _crc32(path)))
            path = tensors
            fsync_dir(tensors)
        except OSError as exc:
            raise OSError(exc.errno, f"{path}: {exc.strerror or exc}") from exc
        return out

    def _commit(
        self,
        final: Path,
        tmp: Path,
        manifest: dict[str, Any],
        records: list[dict[str, list[Any]]],
        rng: list[dict[str, Any]] | None,
    ) -> None:
        """Rank 0 completes the checkpoint: ``rng.json``, then ``state.json`` with every rank's files
        (``records``: ``{name: [size, crc]}`` per rank), the rename into place, ``latest``, pruning."""
        if rng is not None:
            self._write_json(tmp / RNG_FILE, {"ranks": rng})
            records[0][RNG_FILE] = [(tmp / RNG_FILE).stat().st_size, _crc32(tmp / RNG_FILE)]
        files = {name: record for own in records for name, record in own.items()}
        manifest = {
            **manifest,
            "files": {name: files[name][0] for name in sorted(files)},
            "checksums": {name: files[name][1] for name in sorted(files)},
            "writers": {
                name: r for r, own in enumerate(records) for name in own if _SHARD.match(Path(name).name)
            },
        }
        self._write_json(tmp / STATE_FILE, manifest)
        fsync_dir(tmp)
        if final.exists():  # the same step written again (after resuming from an earlier one)
            self._delete(final)
        os.rename(tmp, final)
        fsync_dir(self.root)
        self._write_pointer(final.name)
        self.prune()

    def _failed(
        self, step: int, tmp: Path, rank: int, exc: BaseException, errors: Sequence[OSError]
    ) -> BaseException:
        """Remove what a failed write left (rank 0) and say what happened (a full disk, by name, also
        when ``torch.save`` replaced the write's ``OSError`` with its own "unexpected pos")."""
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        full = is_disk_full(exc) or any(is_disk_full(error) for error in errors)
        if not isinstance(exc, (DiskFullError, KeyboardInterrupt, SystemExit)) and full:
            kept = self.latest()
            return disk_full(
                self.root,
                f"the checkpoint of step {step} was not written (nothing of it is left); "
                + (
                    f"the last complete checkpoint, {kept.name}, is kept"
                    if kept
                    else "no earlier checkpoint exists"
                ),
            )
        return exc

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

    def _skip(self, path: Path, reason: str) -> None:
        """Log once that checkpoint ``path`` is passed over, and why."""
        if reason not in self._reported:
            self._reported.add(reason)
            log.warning("skipping checkpoint %s: %s", path.name, reason)

    def complete(self) -> list[Path]:
        """The complete checkpoints (every file there with its recorded size), oldest first; incomplete
        ones are skipped with a log line, foreign directories silently."""
        if not self.root.is_dir():
            return []
        found = []
        for path in self.root.iterdir():
            if not path.is_dir() or not _STEP_DIR.match(path.name):
                continue
            try:
                manifest = _read_manifest(path)
            except CheckpointError as exc:
                self._skip(path, str(exc))
                continue
            found.append((manifest["step"], path))
        return [path for _, path in sorted(found)]

    def latest(self) -> Path | None:
        """The complete checkpoint with the highest step, or ``None`` (sizes checked, not contents)."""
        complete = self.complete()
        return complete[-1] if complete else None

    def latest_valid(self, at_most: int | None = None) -> Path | None:
        """The newest checkpoint (of a step up to ``at_most``, when given) whose contents match their
        checksums; a newer damaged one is passed over with a warning naming it (resume and export fall
        back to the previous complete checkpoint)."""
        for path in reversed(self.complete()):
            if at_most is not None and _step_of(path) > at_most:
                continue
            try:
                self.verify(path)
            except CheckpointError as exc:
                self._skip(path, f"{exc}; falling back to the previous complete checkpoint")
                continue
            return path
        return None

    def verify(self, path: str | Path) -> dict[str, Any]:
        """The manifest of checkpoint ``path`` after checking sizes and contents (:class:`CheckpointError`
        naming the damaged file otherwise); each checkpoint is read once per manager. In a process group
        a rank checks the files it reads (its shards and the shared files), outside one every file."""
        path = Path(path)
        manifest = _read_manifest(path)
        if path not in self._verified:
            _check_contents(path, manifest, _process_rank())
            self._verified.add(path)
        return manifest

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
            return self.latest_valid()
        path = Path(spec)
        self.verify(path)
        return path

    def load(self, path: str | Path) -> Checkpoint:
        """A complete, undamaged checkpoint (raises :class:`CheckpointError` naming what is wrong
        otherwise)."""
        path = Path(path)
        manifest = self.verify(path)
        return Checkpoint(
            path,
            manifest["step"],
            manifest.get("data", {}),
            manifest.get("extra", {}),
            format=manifest["format"],
            aliases=manifest.get("aliases", {}),
        )


def _gather(value: Any, world_size: int, group: Any) -> list[Any]:
    """``value`` of every rank of ``group`` (object collective on its gloo backend)."""
    import torch.distributed as tdist

    out: list[Any] = [None] * world_size
    tdist.all_gather_object(out, value, group=group)
    return out


# --- what a checkpoint holds -----------------------------------------------------------------------


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
        data={"ranks": [r["data"] for r in ranks]},
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
    rng = ckpt.rng_state(dist.rank)
    ckpt.load_into(state, dist, checkpoints.process_group(dist))
    if data is not None:
        data.load_state_dict(ranks[dist.rank])
    if rng is not None:
        restore_rng_state(rng)
    return ckpt.step


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
            step = -1 if found is None else _step_of(found)
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


def _step_of(path: Path) -> int:
    match = _STEP_DIR.match(path.name)
    return int(match.group(1)) if match else -1


def _few(items: Sequence[str], shown: int = 3) -> str:
    """The first ``shown`` of ``items``, and how many more."""
    more = f", and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def _read_error(path: Path, exc: BaseException) -> CheckpointError:
    """What a failed DCP read of checkpoint ``path`` means: refused pickled objects, or a corrupt file."""
    text = str(exc)
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
    if found:
        # torch's own message advises weights_only=False, which would run whatever the file holds
        return CheckpointError(
            f"{path}: refused to load: it holds objects other than tensors and plain containers (it names "
            f"{found.group(1)}), so "
            "it was not written by videorl or has been tampered with"
        )
    return CheckpointError(
        f"{path} is corrupt ({type(exc).__name__}: {text.splitlines()[0] if text else ''}); resume from "
        "an earlier checkpoint, or pass --resume with another checkpoint directory"
    )


# --- export ---------------------------------------------------------------------------------------


def resolve_checkpoint(source: Path) -> Path:
    """The checkpoint ``source`` names: a checkpoint directory, or a run directory (its latest one)."""
    if (source / CHECKPOINT_DIR).is_dir() or (source / "config.yaml").is_file():
        latest = CheckpointManager(source / CHECKPOINT_DIR).latest_valid()
        if latest is None:
            raise CheckpointError(
                f"{source} holds no complete checkpoint (looked in {source / CHECKPOINT_DIR})"
            )
        return latest
    CheckpointManager(source.parent).load(source)  # a complete checkpoint, or an error naming what is wrong
    return source


def run_config(checkpoint: Path) -> TrainConfig | None:
    """The ``config.yaml`` of the run that wrote ``checkpoint``; None for a checkpoint outside its run."""
    from videorl.config import load_config

    config_file = checkpoint.parent.parent / CONFIG_FILE
    return load_config(config_file) if config_file.is_file() else None


def base_model_of(checkpoint: Path) -> Path:
    """The base model directory the run of ``checkpoint`` trained from (``model.path`` of its config.yaml)."""

    config = run_config(checkpoint)
    if config is None:
        raise VideorlError(
            f"{checkpoint.parent.parent / CONFIG_FILE} not found: cannot tell which base model {checkpoint} "
            "was trained from; pass --base-model DIR"
        )
    return Path(config.model.path)


def export_hf_model(
    source: str | Path | Checkpoint | Mapping[str, torch.Tensor],
    base_model_dir: str | Path,
    out_dir: str | Path,
    *,
    overwrite: bool = False,
    dtype: torch.dtype | None = None,
) -> Path:
    """Write a plain HF model directory: the base model's config, tokenizer and processor files with
    the weights of ``source`` (a checkpoint, its directory, or a state dict) as ``model.safetensors``,
    their floating tensors in ``dtype`` (None: as ``source`` holds them; given, ``config.json`` says it).

    Tied tensors are written once, under their first name, as ``save_pretrained`` does. The directory
    appears atomically and carries :data:`EXPORT_MARKER`. ``out_dir`` may not be, hold or lie inside the
    checkpoint, its run or the base model, and ``overwrite`` replaces only an earlier export (or an
    empty folder).
    """
    base, out = Path(base_model_dir), Path(out_dir)
    if not (base / "config.json").is_file():
        raise CheckpointError(f"{base} is not a model directory: it has no config.json")
    if isinstance(source, (str, Path)):
        source = CheckpointManager(Path(source).parent).load(source)
    protected: dict[str, Path] = {}
    if isinstance(source, Checkpoint):
        run = source.path.parent.parent
        if (run / "config.yaml").is_file():
            protected["the run"] = run
        protected["the checkpoints"] = source.path.parent
    protected["the base model"] = base
    check_export_target(out, protected, overwrite)
    state = source.model_state() if isinstance(source, Checkpoint) else source
    tmp = out.parent / f".tmp-{out.name}-{uuid.uuid4().hex[:8]}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
        for item in sorted(base.iterdir()):
            name = item.name
            is_weight = name.endswith(_WEIGHT_SUFFIXES) or name.endswith(
                tuple(f"{s}.index.json" for s in _WEIGHT_SUFFIXES)
            )
            if item.is_file() and not is_weight and not name.startswith("."):
                shutil.copy2(item, tmp / name)
                fsync_file(tmp / name)
        _save_tensors(tmp / MODEL_FILE, state, dtype)
        what = {
            "format": FORMAT_VERSION,
            "source": str(source.path) if isinstance(source, Checkpoint) else None,
            "base_model": str(base),
        }
        if dtype is not None:
            what["dtype"] = _record_dtype(tmp / "config.json", dtype)
        atomic_write_text(tmp / EXPORT_MARKER, json.dumps(what) + "\n")
        fsync_dir(tmp)
        if out.exists():
            trash = out.parent / f".trash-{out.name}-{uuid.uuid4().hex[:8]}"
            os.rename(out, trash)
            shutil.rmtree(trash, ignore_errors=True)
        os.rename(tmp, out)
        fsync_dir(out.parent)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, Exception) and not isinstance(exc, DiskFullError) and is_disk_full(exc):
            raise disk_full(out.parent, f"{out} was not written (nothing of it is left)") from exc
        raise
    return out


def _record_dtype(config_file: Path, dtype: torch.dtype) -> str:
    """Set the weights' dtype in an HF ``config.json`` (its ``dtype``/``torch_dtype`` and those of its
    sub-configs, ``text_config``, ``vision_config``, ...), so that ``from_pretrained(dtype="auto")`` and
    vLLM's ``dtype="auto"`` load what the file holds; the dtype's name."""
    name = str(dtype).removeprefix("torch.")
    config = json.loads(config_file.read_text(encoding="utf-8"))
    for section in [config, *(v for v in config.values() if isinstance(v, dict))]:
        for key in ("dtype", "torch_dtype"):
            if key in section:
                section[key] = name
    if "torch_dtype" not in config:
        config["dtype"] = name
    atomic_write_text(config_file, json.dumps(config, indent=2) + "\n")
    return name


def _within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def check_export_target(out: Path, protected: dict[str, Path], overwrite: bool) -> None:
    """Refuse an export folder that would replace, or be replaced with, anything in ``protected``, and one
    that exists unless ``overwrite`` and it is an earlier export or empty."""
    target = out.resolve()
    for what, path in protected.items():
        where = path.resolve()
        if _within(target, where) or _within(where, target):
            relation = "is" if target == where else "lies inside" if _within(target, where) else "holds"
            raise CheckpointError(f"{out} {relation} {what} ({path}); export to a folder outside it")
    if not out.exists() and not out.is_symlink():
        return
    if not overwrite:
        raise CheckpointError(f"{out} already exists; choose another directory or pass overwrite=True")
    if out.is_symlink() or not out.is_dir():
        raise CheckpointError(f"{out} is not a folder written by videorl export; refusing to replace it")
    if not (out / EXPORT_MARKER).is_file() and any(out.iterdir()):
        raise CheckpointError(
            f"{out} was not written by videorl export (it has no {EXPORT_MARKER}); refusing to replace it: "
            "choose another directory or remove it yourself"
        )
