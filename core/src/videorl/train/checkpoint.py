"""Checkpoints of a training run: written atomically, resumed from the last complete one, exported to HF.

Layout under ``<output_dir>/checkpoints``::

    step_000020/
        model.safetensors   model state dict (tied tensors stored once, their other names in metadata)
        optimizer.pt        optimizer state dict (torch.save; read back with weights_only=True)
        rng.json            python/numpy/torch RNG states, one entry per rank
        state.json          step, data position, extra fields, the size and CRC-32 of every file (written last)
    latest                  the name of the newest checkpoint (a convenience; resuming scans instead)

A checkpoint is written into a hidden temporary directory, every file fsynced, then renamed into
place; ``latest`` is replaced after that. A writer killed at any point (or a full disk) leaves either
no checkpoint for that step or a complete one: ``resume="auto"`` takes the highest step whose
``state.json`` lists files that all exist with their recorded sizes and checksums, logs each one it
skips, and ignores temporary directories (removed by the next save). Only one process (rank 0)
writes; gather full state dicts first.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from videorl.atomic import DiskFullError, atomic_write_text, disk_full, fsync_dir, fsync_file, is_disk_full
from videorl.errors import VideorlError

if TYPE_CHECKING:
    import torch

log = logging.getLogger("videorl.checkpoint")

FORMAT_VERSION = 1
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng.json"
STATE_FILE = "state.json"
LATEST_FILE = "latest"
#: the file that marks a folder written by :func:`export_hf_model` (the only kind ``overwrite`` replaces)
EXPORT_MARKER = ".videorl-export.json"
_STEP_DIR = re.compile(r"^step_(\d+)$")
_ALIASES_KEY = "videorl.aliases"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".msgpack", ".h5", ".gguf")

__all__ = [
    "EXPORT_MARKER",
    "Checkpoint",
    "CheckpointError",
    "CheckpointManager",
    "base_model_of",
    "capture_rng_state",
    "checkpoint_due",
    "export_hf_model",
    "resolve_checkpoint",
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
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    try:
        state = load_file(str(path))
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
        aliases = json.loads(metadata.get(_ALIASES_KEY, "{}"))
        for alias, name in aliases.items():
            state[alias] = state[name]
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


class _ErrorRecorder:
    """A file wrapper that remembers the ``OSError`` of a failed write: ``torch.save`` replaces it with
    its own "unexpected pos" error, which would hide that the disk is full."""

    def __init__(self, f: Any) -> None:
        self.f = f
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return int(self.f.write(data))
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.f.flush()


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
        corrupt = CheckpointError(
            f"{path} is corrupt (not a readable torch.save archive); resume from an earlier checkpoint, "
            "or pass --resume with another checkpoint directory"
        )
        if not zipfile.is_zipfile(path):
            raise corrupt
        try:
            state: dict[str, Any] = torch.load(path, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as exc:
            # torch's own message advises weights_only=False, which would run whatever the file holds
            found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
            what = f" (it names {found.group(1)})" if found else ""
            raise CheckpointError(
                f"{path}: refused to load the optimizer state: it holds objects other than tensors and "
                f"plain containers{what}, so it was not written by videorl or has been tampered with"
            ) from None
        except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise corrupt from None
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


def _check_contents(path: Path, manifest: dict[str, Any]) -> None:
    """Raise :class:`CheckpointError` unless every file of checkpoint ``path`` has its recorded CRC-32 (or,
    for checkpoints written before checksums, a readable safetensors header and torch archive)."""
    from safetensors import SafetensorError, safe_open

    checksums: dict[str, str] = manifest.get("checksums", {})
    for name, expected in checksums.items():
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
    """Writes, finds, prunes and loads the checkpoints under ``root``."""

    def __init__(self, root: str | Path, *, keep_last: int = 0) -> None:
        self.root = Path(root)
        self.keep_last = keep_last
        self._reported: set[str] = set()  # skipped checkpoints already logged (one line each)
        self._verified: set[Path] = set()  # checkpoints whose contents matched their checksums

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
        final = self.path_for(step)
        tmp = self.root / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._remove_leftovers()
            tmp.mkdir()
            _save_tensors(tmp / MODEL_FILE, model_state, keep_aliases=True)
            if optimizer_state is not None:
                with open(tmp / OPTIMIZER_FILE, "wb") as f:
                    recorder = _ErrorRecorder(f)
                    try:
                        torch.save(dict(optimizer_state), cast("IO[bytes]", recorder))
                    except RuntimeError as exc:
                        if recorder.error is not None:
                            raise recorder.error from exc
                        raise
                    f.flush()
                    os.fsync(f.fileno())
            if rng is not None:
                ranks = [dict(rng)] if isinstance(rng, Mapping) else [dict(r) for r in rng]
                self._write_json(tmp / RNG_FILE, {"ranks": ranks})
            files = sorted(tmp.iterdir())
            manifest = {
                "format": FORMAT_VERSION,
                "step": step,
                "files": {p.name: p.stat().st_size for p in files},
                "checksums": {p.name: _crc32(p) for p in files},
                "data": data_json,
                "extra": extra_json,
            }
            self._write_json(tmp / STATE_FILE, manifest)
            fsync_dir(tmp)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, Exception) and is_disk_full(exc):
                kept = self.latest()
                raise disk_full(
                    self.root,
                    f"the checkpoint of step {step} was not written (nothing of it is left); "
                    + (
                        f"the last complete checkpoint, {kept.name}, is kept"
                        if kept
                        else "no earlier checkpoint exists"
                    ),
                ) from exc
            raise
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

    def latest_valid(self) -> Path | None:
        """The newest checkpoint whose contents match their checksums; a newer damaged one is passed over
        with a warning naming it (resume and export fall back to the previous complete checkpoint)."""
        for path in reversed(self.complete()):
            try:
                self.verify(path)
            except CheckpointError as exc:
                self._skip(path, f"{exc}; falling back to the previous complete checkpoint")
                continue
            return path
        return None

    def verify(self, path: str | Path) -> dict[str, Any]:
        """The manifest of checkpoint ``path`` after checking sizes and contents (:class:`CheckpointError`
        naming the damaged file otherwise); each checkpoint is read in full once per manager."""
        path = Path(path)
        manifest = _read_manifest(path)
        if path not in self._verified:
            _check_contents(path, manifest)
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
        """A complete, undamaged checkpoint (raises :class:`CheckpointError` naming what is wrong otherwise)."""
        path = Path(path)
        manifest = self.verify(path)
        return Checkpoint(path, manifest["step"], manifest.get("data", {}), manifest.get("extra", {}))


# --- export ---------------------------------------------------------------------------------------


def resolve_checkpoint(source: Path) -> Path:
    """The checkpoint ``source`` names: a checkpoint directory, or a run directory (its latest one)."""
    from videorl.train.compose import CHECKPOINT_DIR  # compose imports this module

    if (source / CHECKPOINT_DIR).is_dir() or (source / "config.yaml").is_file():
        latest = CheckpointManager(source / CHECKPOINT_DIR).latest_valid()
        if latest is None:
            raise CheckpointError(
                f"{source} holds no complete checkpoint (looked in {source / CHECKPOINT_DIR})"
            )
        return latest
    CheckpointManager(source.parent).load(source)  # a complete checkpoint, or an error naming what is wrong
    return source


def base_model_of(checkpoint: Path) -> Path:
    """The base model directory the run of ``checkpoint`` trained from (``model.path`` of its config.yaml)."""
    from videorl.config import load_config
    from videorl.train.metrics import CONFIG_FILE

    config_file = checkpoint.parent.parent / CONFIG_FILE
    if not config_file.is_file():
        raise VideorlError(
            f"{config_file} not found: cannot tell which base model {checkpoint} was trained from; "
            "pass --base-model DIR"
        )
    return Path(load_config(config_file).model.path)


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
    _check_export_target(out, protected, overwrite)
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
        _save_tensors(tmp / MODEL_FILE, state, keep_aliases=False)
        what = {
            "format": FORMAT_VERSION,
            "source": str(source.path) if isinstance(source, Checkpoint) else None,
            "base_model": str(base),
        }
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


def _within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def _check_export_target(out: Path, protected: dict[str, Path], overwrite: bool) -> None:
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
