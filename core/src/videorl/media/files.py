"""Crash-safe writes for the cache: a temporary file beside the target, fsynced, then renamed over it."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

TEMP_MARK = ".tmp-"


def temp_path(path: Path) -> Path:
    """A unique hidden temporary name beside ``path`` (recognisable by :data:`TEMP_MARK`)."""
    return path.with_name(f".{path.name}{TEMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")


def is_temp(path: Path) -> bool:
    return path.name.startswith(".") and TEMP_MARK in path.name


def _fsync(path: Path, flags: int = os.O_RDONLY) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` to fill a temporary file, then rename it to ``path``: readers and later
    runs see the old file or the whole new one, never a part, even if this process is killed."""
    tmp = temp_path(path)
    try:
        write(tmp)
        _fsync(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")

    atomic_write(path, write)
