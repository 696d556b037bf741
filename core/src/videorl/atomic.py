"""Crash-safe file writes: a temporary file in the target's directory, fsynced, renamed over the target,
then the directory fsynced. Readers, and later runs, see the old file or the whole new one, never a part,
even when the writer is killed (or the machine loses power) at any moment.

Temporary files are hidden and unique per write, and name their writer (``.NAME.tmp-MACHINE-PID-START-
RANDOM.tmp``), so concurrent writers of one target never share one; :func:`is_temp` recognises them and
:func:`is_stale_temp` tells those a dead writer left behind from those a live one is still writing.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import socket
import stat
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from videorl.errors import VideorlError

__all__ = [
    "TEMP_MARK",
    "DiskFullError",
    "OutputError",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_output",
    "disk_full",
    "fsync_dir",
    "fsync_file",
    "is_disk_full",
    "is_stale_temp",
    "is_temp",
    "temp_path",
    "temp_writer_alive",
    "write_output",
    "write_output_bytes",
    "write_output_text",
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


def _start_ticks(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, Linux), or None (no such process, or no
    ``/proc``): with the pid, it names one process for the whole life of the machine's boot."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read(4096).rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces
        return int(fields[19])  # field 22 of proc(5), counted from field 3
    except (OSError, IndexError, ValueError):
        return None


def _machine_id() -> str:
    """This machine, boot and PID namespace (8 hex digits): where a pid names the same process."""
    parts = [socket.gethostname()]
    with contextlib.suppress(OSError):
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    with contextlib.suppress(OSError):
        parts.append(str(os.stat("/proc/self/ns/pid").st_ino))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:8]


_MACHINE = _machine_id()


def temp_path(path: str | Path) -> Path:
    """A unique hidden temporary name beside ``path``, naming its writer: ``.NAME.tmp-MACHINE-PID-START-
    RANDOM.tmp`` (:func:`temp_writer_alive`). The ``.tmp`` suffix keeps it out of globs for the target's
    own suffix (``*.json``, ``*.safetensors``)."""
    path = Path(path)
    pid = os.getpid()
    writer = f"{_MACHINE}-{pid}-{_start_ticks(pid) or 0}"
    return path.with_name(f".{path.name}{TEMP_MARK}{writer}-{uuid.uuid4().hex[:8]}.tmp")


def temp_writer_alive(path: str | Path) -> bool | None:
    """Whether the process that writes the temporary file ``path`` is still running: None when that
    cannot be told here (written on another machine, boot or PID namespace, by an older videorl, or
    no ``/proc``)."""
    parts = Path(path).name.removesuffix(".tmp").rsplit(TEMP_MARK, 1)[-1].split("-")
    if len(parts) != 4 or parts[0] != _MACHINE or not (parts[1].isdigit() and parts[2].isdigit()):
        return None
    if parts[2] == "0":  # its writer could not read its own start time
        return None
    if not Path("/proc/self/stat").exists():
        return None
    return _start_ticks(int(parts[1])) == int(parts[2])


def is_stale_temp(path: str | Path, grace: float) -> bool:
    """Whether the temporary file ``path`` may be removed: its writer is dead, or, when that cannot be
    told, it was last written more than ``grace`` seconds ago. A live writer's file is never stale."""
    alive = temp_writer_alive(path)
    if alive is not None:
        return not alive
    try:
        return time.time() - os.stat(path, follow_symlinks=False).st_mtime > grace
    except FileNotFoundError:
        return False


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


# --- outputs a user names -------------------------------------------------------------------------


class OutputError(VideorlError):
    """An output path a command may not write: one of its inputs, inside a run it reads, or a folder."""


def _inside(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def check_output(
    target: str | Path,
    *,
    inputs: Iterable[str | Path | None] = (),
    reads: Iterable[str | Path | None] = (),
    allowed: Iterable[str | Path] = (),
    what: str = "the output",
) -> None:
    """Refuse (:class:`OutputError`) an output ``target`` that is one of the command's ``inputs`` (also
    through a link or another name), lies inside a folder it ``reads`` (a run, a cache) unless it is one of
    ``allowed`` (the file the command itself keeps there), or is a folder or a socket."""
    real = os.path.realpath(target)
    for source in [p for p in inputs if p is not None]:
        same = os.path.exists(target) and os.path.exists(source) and os.path.samefile(target, source)
        if same or real == os.path.realpath(source):
            raise OutputError(
                f"{what} {target} is the input file {source} (or a link to it): writing it would replace "
                f"what is read; choose another {what}"
            )
    kept = {os.path.realpath(p) for p in allowed}
    for folder in [p for p in reads if p is not None]:
        if real not in kept and _inside(real, os.path.realpath(folder)):
            raise OutputError(
                f"{what} {target} lies inside {folder}, which this command reads; write it somewhere else"
            )
    with contextlib.suppress(FileNotFoundError):
        mode = os.stat(target).st_mode
        if stat.S_ISDIR(mode) or stat.S_ISSOCK(mode):
            raise OutputError(
                f"{what} {target} is a {'folder' if stat.S_ISDIR(mode) else 'socket'}, not a file"
            )


def write_output(target: str | Path, write: Callable[[Path], object]) -> None:
    """Write a user-named output with ``write(path)``: a regular file (or a new one) atomically
    (:func:`atomic_write`); through a link, the file it leads to (the link stays); into a device or a
    FIFO (``/dev/null``, ``/dev/stdout``) directly, never replacing the node; a block device or anything
    else is refused. Check it first with :func:`check_output`."""
    real = Path(os.path.realpath(target))
    try:
        mode = os.stat(real).st_mode
    except FileNotFoundError:
        mode = stat.S_IFREG
    if stat.S_ISREG(mode):
        atomic_write(real, write)
    elif stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        write(real)
    else:
        raise OutputError(f"{target} is neither a file nor a device: refusing to replace it")


def write_output_bytes(target: str | Path, data: bytes) -> None:
    """Write ``data`` to a user-named output (:func:`write_output`)."""

    def write(path: Path) -> None:
        with open(path, "wb") as f:
            f.write(data)

    write_output(target, write)


def write_output_text(target: str | Path, text: str) -> None:
    """Write ``text`` in UTF-8 to a user-named output (:func:`write_output`)."""
    write_output_bytes(target, text.encode("utf-8"))
