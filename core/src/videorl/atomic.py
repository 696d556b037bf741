"""Crash-safe file writes: a temporary file in the target's directory, fsynced, renamed over the target,
then the directory fsynced. Readers, and later runs, see the old file or the whole new one, never a part,
even when the writer is killed (or the machine loses power) at any moment.

Temporary files are hidden and unique per write (``.NAME.tmp-PID-RANDOM.tmp``), so concurrent writers of
one target never share one; :func:`is_temp` recognises those a killed writer left behind.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from videorl.errors import VideorlError

__all__ = [
    "TEMP_MARK",
    "DiskFullError",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "disk_full",
    "fsync_dir",
    "fsync_file",
    "is_disk_full",
    "is_temp",
    "temp_path",
]

#: what every temporary name holds (after its leading dot)
TEMP_MARK = ".tmp-"


#: errno values that mean "no room left": the device, or the user's quota
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: how libraries that wrap the OS error in their own exception (safetensors) spell it
_FULL_TEXTS = ("No space left on device", "os error 28", "Disk quota exceeded")


class DiskFullError(VideorlError, OSError):
    """A write failed because the file system is full (the message names the folder and what was kept)."""


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says that the disk or quota is full."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _FULL_ERRNOS:
            return True
        if any(text in str(current) for text in _FULL_TEXTS):
            return True
        current = current.__cause__ or current.__context__
    return False


def disk_full(path: str | Path, what: str) -> DiskFullError:
    """The error for a write into folder ``path`` that ran out of space; ``what`` says what was not written
    and what was kept."""
    try:
        free = f"{shutil.disk_usage(path).free:,} bytes free"
    except OSError:
        free = "free space unknown"
    return DiskFullError(f"disk full at {path} ({free}): {what}. Free some space and run it again")


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
    and the temporary file is removed; a full disk is a :class:`DiskFullError` naming the folder.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_path(path)
        try:
            write(tmp)
            fsync_file(tmp)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(path.parent)
    except DiskFullError:
        raise
    except Exception as exc:
        if is_disk_full(exc):
            raise disk_full(
                path.parent, f"{path.name} was not written (the previous {path.name}, if any, is kept)"
            ) from exc
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` (see :func:`atomic_write`)."""

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    atomic_write(path, write)


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` in UTF-8 (see :func:`atomic_write`)."""
    atomic_write_bytes(path, text.encode("utf-8"))
