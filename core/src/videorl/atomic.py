"""Crash-safe file writes: a temporary file in the target's directory, fsynced, renamed over the target,
then the directory fsynced. Readers, and later runs, see the old file or the whole new one, never a part,
even when the writer is killed (or the machine loses power) at any moment.

Temporary files are hidden and unique per write (``.NAME.tmp-PID-RANDOM.tmp``), so concurrent writers of
one target never share one; :func:`is_temp` recognises those a killed writer left behind.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "TEMP_MARK",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "fsync_dir",
    "fsync_file",
    "is_temp",
    "temp_path",
]

#: what every temporary name holds (after its leading dot)
TEMP_MARK = ".tmp-"


def temp_path(path: str | Path) -> Path:
    """A unique hidden temporary name beside ``path``. The ``.tmp`` suffix keeps it out of globs for the
    target's own suffix (``*.json``, ``*.safetensors``)."""
    path = Path(path)
    return path.with_name(f".{path.name}{TEMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")


def is_temp(path: str | Path) -> bool:
    """Whether ``path`` is named like a temporary file of this module."""
    name = Path(path).name
    return name.startswith(".") and TEMP_MARK in name


def _fsync(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: str | Path) -> None:
    """Flush a file written by someone else (e.g. a library) to disk."""
    _fsync(path)


def fsync_dir(path: str | Path) -> None:
    """Make the entries of directory ``path`` (renames, new files) durable."""
    _fsync(path)


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> None:
    """Replace ``path`` with the file that ``write(tmp)`` creates at the temporary path ``tmp``.

    For writers that take a file name, e.g. ``atomic_write(p, lambda tmp: save_file(tensors, str(tmp)))``.
    The directory of ``path`` is created when missing. If ``write`` raises, ``path`` is left as it was
    and the temporary file is removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        write(tmp)
        fsync_file(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` (see :func:`atomic_write`)."""

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    atomic_write(path, write)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` in UTF-8 (see :func:`atomic_write`)."""
    atomic_write_bytes(path, text.encode("utf-8"))
