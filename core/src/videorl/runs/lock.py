"""One writer per folder: a run directory (``videorl train``) and an evaluation folder (``videorl eval run
--out``) are locked by the process that writes them.

Two trainings in one ``output_dir`` would remove each other's checkpoint in flight and cut each other's
``metrics.jsonl``; two evaluations into one ``--out`` would lose each other's summaries. The lock is
``fcntl.flock`` on :data:`LOCK_FILE` in the folder, which holds the holder's pid, start time and host:
a second writer is refused with a message naming them. The kernel drops the lock when its process ends,
however it ends, so a lock file that a dead process left (its pid no longer running) is taken over.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import ClassVar

from videorl.errors import VideorlError

LOCK_FILE = ".videorl.lock"
_MAX_LOCK_BYTES = 4096

__all__ = ["LOCK_FILE", "FolderLock", "LockedError"]


class LockedError(VideorlError):
    """Another live process writes the folder (the message names its pid and host)."""


class FolderLock:
    """The lock of one folder, held by this process until :meth:`release` (or its exit). Taking it again
    in the process that holds it counts one more holder; the lock goes with the last release."""

    _held: ClassVar[dict[Path, tuple[int, int]]] = {}  # folder: (descriptor, holders), for this process
    _guard: ClassVar[threading.Lock] = threading.Lock()  # over _held: threads of one process share it

    def __init__(self, folder: str | Path, what: str) -> None:
        self.folder = Path(folder).absolute()
        self.what = what
        self.created: list[Path] = []  # folders made for the lock: removed with it when left empty
        self._released = False

    @classmethod
    def acquire(cls, folder: str | Path, what: str = "the folder") -> FolderLock:
        """Lock ``folder`` (created when missing) for this process; :class:`LockedError` naming the
        holder when another live process holds it. ``what`` names the folder in messages."""
        lock = cls(folder, what)
        with cls._guard:
            lock._take()
        return lock

    def _take(self) -> None:
        held = self._held.get(self.folder)
        if held is not None:
            self._held[self.folder] = (held[0], held[1] + 1)
            return
        # the folders this lock creates (the run's and any missing parents), removed again if still empty
        self.created = [f for f in (self.folder, *self.folder.parents) if not f.exists()]
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = _locked_file(self.folder / LOCK_FILE, self.folder, self.what)
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started": round(time.time(), 3)}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        self._held[self.folder] = (fd, 1)

    def release(self) -> None:
        """Let the folder go (once; the lock file is removed with the last holder)."""
        with self._guard:
            self._let_go()

    def _let_go(self) -> None:
        if self._released:
            return
        self._released = True
        fd, holders = self._held.pop(self.folder, (-1, 0))
        if holders > 1:
            self._held[self.folder] = (fd, holders - 1)
            return
        if fd < 0:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.folder / LOCK_FILE)  # before the unlock: a waiting writer finds no old record
        os.close(fd)
        for folder in self.created:  # the run's first, then its parents; only while nothing else is there
            try:
                folder.rmdir()
            except OSError:
                break

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _locked_file(path: Path, folder: Path, what: str) -> int:
    """A descriptor of lock file ``path`` holding its ``flock``: retried when the file was removed by the
    holder that released it meanwhile (the lock taken would be on a file no one else opens)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            same = os.path.exists(path) and os.stat(path).st_ino == os.fstat(fd).st_ino
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise LockedError(
                f"{folder} is {what} of another running process ({holder}): two writers would destroy "
                "each other's files; wait for it to end, stop it, or choose another folder"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        if same:
            return fd
        os.close(fd)


def _holder(fd: int) -> str:
    """Who holds the lock, from the record in its file (bounded read): ``pid N on HOST since T``."""
    try:
        record = json.loads(os.pread(fd, _MAX_LOCK_BYTES, 0).decode("utf-8"))
        pid, host = int(record["pid"]), str(record["host"])[:200]
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(record["started"])))
    except (ValueError, KeyError, TypeError, OverflowError, OSError):
        return "its lock file names no pid yet"
    return f"pid {pid} on {host}, since {since}"
