"""A checkpoint's policy as a plain HF model directory (``videorl export``), and what export needs to
know of a checkpoint: which one a path names, the run's config, the base model it trained from.

``export_hf_model`` writes a folder marked as an export (:data:`EXPORT_MARKER`); only such a folder is
ever replaced, and never one that holds, or is held by, the run or the base model.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from videorl.atomic import DiskFullError, atomic_write_text, disk_full, fsync_dir, fsync_file, is_disk_full
from videorl.errors import VideorlError
from videorl.runs.checkpoint import CHECKPOINT_DIR, Checkpoint, CheckpointManager
from videorl.runs.manifest import FORMAT_VERSION, MODEL_FILE, CheckpointError
from videorl.runs.records import CONFIG_FILE
from videorl.runs.tensors import save_tensors

if TYPE_CHECKING:
    import torch

    from videorl.config import TrainConfig

#: the file that marks a folder written by :func:`export_hf_model` (the only kind ``overwrite`` replaces)
EXPORT_MARKER = ".videorl-export.json"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".msgpack", ".h5", ".gguf")

__all__ = [
    "EXPORT_MARKER",
    "base_model_of",
    "check_export_target",
    "export_hf_model",
    "resolve_checkpoint",
    "run_config",
]


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
        save_tensors(tmp / MODEL_FILE, state, dtype)
        what = {
            "format": FORMAT_VERSION,
            "source": str(source.path) if isinstance(source, Checkpoint) else None,
            "base_model": str(base),
        }
        if dtype is not None:
            what["dtype"] = _record_dtype(tmp / "config.json", dtype)
        atomic_write_text(tmp / EXPORT_MARKER, json.dumps(what) + "\n")
        publish_folder(tmp, out)
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


def publish_folder(tmp: Path, out: Path) -> None:
    """Put the finished folder ``tmp`` (a sibling of ``out``) at ``out`` durably: an older ``out`` is moved
    aside and removed, so that readers see the old folder or the new one, never a half-written one."""
    fsync_dir(tmp)
    if out.exists():
        trash = out.parent / f".trash-{out.name}-{uuid.uuid4().hex[:8]}"
        os.rename(out, trash)
        shutil.rmtree(trash, ignore_errors=True)
    os.rename(tmp, out)
    fsync_dir(out.parent)
