"""What a checkpoint says about itself: ``state.json`` (its step, data positions, and the size, CRC-32
and writer of every file) and ``rng.json``, read as untrusted input.

A checkpoint directory may come from elsewhere. Every name ``state.json`` lists must be a relative path
to a regular file inside the checkpoint (no absolute path, no ``..``, no link on the way), every field
has its type (one :class:`CheckpointError` naming the file and field otherwise), and each file is read
with a bound: ``state.json`` and ``rng.json`` up to a fixed size, a checksummed file up to the size
``state.json`` records for it (a file that grew reads as damaged, never as endless).
"""

from __future__ import annotations

import json
import os
import re
import stat
import zlib
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from videorl.errors import VideorlError

FORMAT_VERSION = 2
TENSORS_DIR = "tensors"
RNG_FILE = "rng.json"
STATE_FILE = "state.json"
METADATA_FILE = ".metadata"  # DCP's, in TENSORS_DIR
#: format 1 (before sharding): the whole model and optimizer state, written by rank 0
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
#: the most bytes ``state.json`` and ``rng.json`` may hold (a 1024-rank run's RNG states are ~30 MB)
MAX_STATE_BYTES = 64 << 20
MAX_RNG_BYTES = 256 << 20
STEP_DIR = re.compile(r"^step_(\d+)$")
SHARD = re.compile(r"^__(\d+)_\d+\.distcp$")
_CHECKSUM = re.compile(r"^crc32:[0-9a-f]{8}$")
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class CheckpointError(VideorlError):
    """A checkpoint is missing, incomplete or unreadable (the message names it and what to do)."""


def step_of(path: Path) -> int:
    """The step a checkpoint directory's name says (-1: not a checkpoint's name)."""
    match = STEP_DIR.match(path.name)
    return int(match.group(1)) if match else -1


def open_inside(checkpoint: Path, name: str) -> int:
    """A descriptor of file ``name`` of ``checkpoint`` opened for reading, after checking that ``name`` is
    a relative path to a regular file inside it that no link leads to (:class:`CheckpointError`)."""
    parts = PurePosixPath(name).parts
    if not parts or name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts):
        raise CheckpointError(
            f"{checkpoint}/{STATE_FILE} lists {name!r}: not a relative path inside the checkpoint; "
            "it was not written by videorl or has been tampered with"
        )
    where = checkpoint
    for part in parts[:-1]:
        where = where / part
        try:
            mode = os.lstat(where).st_mode
        except FileNotFoundError:
            raise CheckpointError(f"{checkpoint} is incomplete: {name} is missing") from None
        if not stat.S_ISDIR(mode):
            raise CheckpointError(f"{checkpoint}: {where.name}/ (of {name}) is not a folder (a link?)")
    try:
        fd = os.open(checkpoint / name, _OPEN_FLAGS)
    except FileNotFoundError:
        raise CheckpointError(f"{checkpoint} is incomplete: {name} is missing") from None
    except OSError as exc:  # ELOOP: a link
        raise CheckpointError(f"{checkpoint}: {name} is not a regular file ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CheckpointError(f"{checkpoint}: {name} is not a regular file; only regular files are read")
    return fd


def read_json(checkpoint: Path, name: str, limit: int) -> Any:
    """JSON file ``name`` of ``checkpoint``, refused above ``limit`` bytes before it is read."""
    fd = open_inside(checkpoint, name)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(fd).st_size
        data = f.read(limit + 1) if size <= limit else b""
    if size > limit or len(data) > limit:
        raise CheckpointError(f"{checkpoint}/{name} is over {limit:,} bytes: not a videorl checkpoint file")
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise CheckpointError(f"{checkpoint}/{name} is unreadable: not JSON ({exc})") from None


def crc32(checkpoint: Path, name: str, size: int) -> str:
    """The CRC-32 of file ``name`` of ``checkpoint``, at most ``size + 1`` bytes read (16 MiB blocks)."""
    fd = open_inside(checkpoint, name)
    crc, left = 0, size + 1
    with os.fdopen(fd, "rb") as f:
        while left > 0 and (block := f.read(min(left, 1 << 24))):
            crc = zlib.crc32(block, crc)
            left -= len(block)
    return f"crc32:{crc:08x}" if left > 0 else "grown"


def file_crc32(path: Path) -> str:
    """The CRC-32 of a file this process wrote (16 MiB blocks, about 7 GB/s)."""
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            crc = zlib.crc32(block, crc)
    return f"crc32:{crc:08x}"


def _field(where: str, field: str, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    """``value`` when it is a ``kind`` (never a bool for an int), else an error naming file and field."""
    if isinstance(value, kind) and not (isinstance(value, bool) and kind in (int, (int, float))):
        return value
    raise CheckpointError(f"{where}: field {field!r} must be {what}, got {type(value).__name__}")


def _mapping(where: str, field: str, value: Any, kind: type, what: str) -> dict[str, Any]:
    """A JSON object whose values are all of ``kind`` (``what`` names it)."""
    _field(where, field, value, dict, "an object")
    for key, item in value.items():
        _field(where, f"{field}.{key}", item, kind, what)
    return dict(value)


def read_manifest(path: Path) -> dict[str, Any]:
    """The ``state.json`` of checkpoint ``path`` with every field of its type, after checking that every
    listed file is a regular file inside it with its recorded size."""
    if STEP_DIR.match(path.name) is None:
        raise CheckpointError(f"{path} is not a checkpoint directory (expected a name like step_000020)")
    if not (path / STATE_FILE).exists() and not (path / STATE_FILE).is_symlink():
        raise CheckpointError(f"{path} is incomplete: it has no {STATE_FILE} (written last)")
    manifest = read_json(path, STATE_FILE, MAX_STATE_BYTES)
    where = f"{path}/{STATE_FILE}"
    _field(where, "(top level)", manifest, dict, "an object")
    if manifest.get("format") not in (1, FORMAT_VERSION) or manifest.get("step") != step_of(path):
        raise CheckpointError(f"{where} does not describe this checkpoint (format or step differ)")
    files = _mapping(where, "files", manifest.get("files", {}), int, "a size in bytes")
    checksums = _mapping(where, "checksums", manifest.get("checksums", {}), str, "'crc32:' and 8 hex digits")
    writers = _mapping(where, "writers", manifest.get("writers", {}), int, "a rank")
    _mapping(where, "aliases", manifest.get("aliases", {}), str, "a stored tensor name")
    _field(where, "data", manifest.get("data", {}), dict, "an object")
    _field(where, "extra", manifest.get("extra", {}), dict, "an object")
    _field(where, "data.ranks", manifest.get("data", {}).get("ranks", []), list, "a list")
    for i, rank in enumerate(manifest.get("data", {}).get("ranks", [])):
        _field(where, f"data.ranks[{i}]", rank, dict, "an object")
    for name in [*checksums, *writers]:
        if name not in files:
            raise CheckpointError(f"{where}: {name!r} has a checksum or writer but no size in 'files'")
    for name, value in checksums.items():
        if not _CHECKSUM.match(value):
            raise CheckpointError(f"{where}: field 'checksums.{name}' must be 'crc32:' and 8 hex digits")
    if manifest["format"] == FORMAT_VERSION and set(checksums) != set(files):
        raise CheckpointError(f"{where}: every file it lists needs a checksum (format {FORMAT_VERSION})")
    for name, size in files.items():
        fd = open_inside(path, name)
        actual = os.fstat(fd).st_size
        os.close(fd)
        if actual != size:
            raise CheckpointError(f"{path} is damaged: {name} has {actual} bytes, {size} were written")
    return manifest


def checked_files(manifest: Mapping[str, Any]) -> dict[str, int]:
    """The files of :data:`TENSORS_DIR` that ``manifest`` checksums, by name in that folder, with their
    sizes: the only files a DCP read of the checkpoint may open."""
    prefix = f"{TENSORS_DIR}/"
    return {
        name.removeprefix(prefix): manifest["files"][name]
        for name in manifest.get("checksums", {})
        if name.startswith(prefix) and "/" not in name.removeprefix(prefix)
    }


def check_contents(path: Path, manifest: Mapping[str, Any], rank: int | None) -> None:
    """Raise :class:`CheckpointError` unless every file of checkpoint ``path`` that ``rank`` reads (None:
    all) has its recorded CRC-32: its own shards and the small shared files, not other ranks' shards
    (format-1 checkpoints written before checksums: a readable safetensors header and torch archive)."""
    import zipfile

    from safetensors import SafetensorError, safe_open

    checksums: dict[str, str] = manifest.get("checksums", {})
    writers: dict[str, int] = manifest.get("writers", {})
    for name, expected in checksums.items():
        if rank is not None and writers.get(name, rank) != rank:
            continue
        if crc32(path, name, manifest["files"][name]) != expected:
            raise CheckpointError(
                f"{path} is corrupt: {name} does not match its checksum (same size, other bytes)"
            )
    if checksums:
        return
    try:
        os.close(open_inside(path, MODEL_FILE))
        with safe_open(str(path / MODEL_FILE), framework="pt") as f:
            f.metadata()
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(
            f"{path} is corrupt: {MODEL_FILE} is not a readable safetensors file ({exc})"
        ) from None
    optimizer = path / OPTIMIZER_FILE
    if optimizer.exists() and not zipfile.is_zipfile(optimizer):
        raise CheckpointError(f"{path} is corrupt: {OPTIMIZER_FILE} is not a readable torch.save archive")


def _rng_fields(where: str, field: str, state: Any) -> dict[str, Any]:
    """One rank's RNG state with each field of the type :func:`videorl.runs.tensors.restore_rng_state`
    needs (lists of integers as they are, each visited once)."""
    _field(where, field, state, dict, "an object")
    python = _field(where, f"{field}.python", state.get("python"), list, "[version, [ints], gauss]")
    numpy = _field(where, f"{field}.numpy", state.get("numpy"), list, "[name, [ints], pos, gauss, cached]")
    if len(python) != 3 or len(numpy) != 5:
        raise CheckpointError(f"{where}: field {field!r}: python needs 3 items, numpy 5")
    _field(where, f"{field}.python[0]", python[0], int, "an integer")
    _field(where, f"{field}.numpy[0]", numpy[0], str, "a string")
    for i in (2, 3):
        _field(where, f"{field}.numpy[{i}]", numpy[i], int, "an integer")
    _field(where, f"{field}.numpy[4]", numpy[4], (int, float), "a number")
    if python[2] is not None:
        _field(where, f"{field}.python[2]", python[2], (int, float), "a number or null")
    lists = {f"{field}.python[1]": python[1], f"{field}.numpy[1]": numpy[1]}
    lists[f"{field}.torch"] = state.get("torch")
    cuda = _field(where, f"{field}.cuda", state.get("cuda", []), list, "a list")
    lists.update({f"{field}.cuda[{i}]": value for i, value in enumerate(cuda)})
    for name, values in lists.items():
        _field(where, name, values, list, "a list of integers")
        if not all(type(v) is int for v in values):
            raise CheckpointError(f"{where}: field {name!r} must be a list of integers")
    return state


def read_rng(path: Path, rank: int) -> dict[str, Any] | None:
    """The RNG state saved for ``rank`` in checkpoint ``path`` (``None`` when none was saved)."""
    if not (path / RNG_FILE).exists():
        return None
    where = f"{path}/{RNG_FILE}"
    data = read_json(path, RNG_FILE, MAX_RNG_BYTES)
    _field(where, "(top level)", data, dict, "an object")
    ranks = _field(where, "ranks", data.get("ranks"), list, "a list (one state per rank)")
    if rank >= len(ranks):
        raise CheckpointError(
            f"{where} holds RNG states of {len(ranks)} ranks, rank {rank} asked: resume with the "
            "same number of processes"
        )
    return _rng_fields(where, f"ranks[{rank}]", ranks[rank])
