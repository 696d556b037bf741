"""Files that a dataset names: only regular files are read, and their size is bounded before reading.

A path in a dataset (a row's video or image, a dataset file, an HF dataset's metadata) may name a FIFO
(opening it blocks until a writer comes), a device (``/dev/zero``, ``/dev/urandom``: endless) or a
folder. Every reader of such a path goes through this module: :func:`open_regular` opens without
blocking (``O_NONBLOCK``) and checks the open file with ``fstat`` before a byte is read;
:func:`regular_stat` checks a path that a library opens itself (FFmpeg, pyarrow); :func:`read_regular`
also bounds the size. Symbolic links are followed (the hub cache's snapshots are links to its blobs):
what counts is the file they lead to.

The rows of one dataset file may decode to at most :func:`max_dataset_bytes` (4 GiB; the environment
variable ``VIDEORL_MAX_DATASET_BYTES`` raises it): a JSON file's size, the decoded size of a Parquet or
Arrow file's values (:mod:`videorl.data.formats`), checked before they are read.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from videorl.errors import DataError

MAX_DATASET_BYTES_ENV = "VIDEORL_MAX_DATASET_BYTES"
DEFAULT_MAX_DATASET_BYTES = 4 << 30
#: the hint that ends every "over the limit" message of a dataset file
RAISE_HINT = f"raise the limit with {MAX_DATASET_BYTES_ENV}=BYTES if the file is genuine, or split it"

_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)


def max_dataset_bytes() -> int:
    """The most bytes the rows of one dataset file may decode to (``VIDEORL_MAX_DATASET_BYTES``)."""
    text = os.environ.get(MAX_DATASET_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_DATASET_BYTES
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = 0
    if value <= 0:
        raise DataError(f"{MAX_DATASET_BYTES_ENV} must be a positive number of bytes, got {text!r}")
    return value


def _kind(mode: int) -> str:
    kinds = {
        stat.S_ISDIR: "a folder",
        stat.S_ISFIFO: "a FIFO (named pipe)",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISSOCK: "a socket",
    }
    return next((name for test, name in kinds.items() if test(mode)), "not a file")


def _not_regular(path: str | os.PathLike[str], mode: int, error: type[DataError]) -> DataError:
    return error(f"{path}: {_kind(mode)}, not a regular file; only regular files are read")


def regular_stat(path: str | os.PathLike[str], error: type[DataError] = DataError) -> os.stat_result:
    """The status of ``path`` (links followed); ``error`` naming it when it is missing or not a regular
    file. For paths that a library opens itself; readers here use :func:`open_regular`."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode, error)
    return st


def open_regular(path: str | os.PathLike[str], error: type[DataError] = DataError) -> BinaryIO:
    """``path`` opened for reading in binary, after checking that it is a regular file: opened without
    blocking, then checked with ``fstat`` (no window for a swap between the check and the read)."""
    try:
        fd = os.open(path, _FLAGS)
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_regular(path, mode, error)
    return os.fdopen(fd, "rb")


def read_regular(
    path: str | os.PathLike[str], limit: int, *, what: str = "the file", hint: str = RAISE_HINT
) -> bytes:
    """The content of the regular file ``path``, refused (``DataError``) when it holds more than
    ``limit`` bytes, before a byte is read; ``hint`` says what to do then."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(limit + 1) if size <= limit else b""  # a file growing meanwhile stays bounded
    if size > limit or len(data) > limit:
        raise DataError(
            f"{path}: {what} is {max(size, len(data)):,} bytes, over the limit of {limit:,}; {hint}"
        )
    return data
