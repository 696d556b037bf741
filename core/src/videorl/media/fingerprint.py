"""Source fingerprints: what a video file holds (size and SHA-256 of its content), checked by mtime.

Hashing a large video on every lookup would be slow, so the hash is remembered per absolute path
with the file's size, mtime and inode; any change to those re-hashes the file. A video replaced at
the same path therefore gets a new fingerprint, and the previous content hash is kept to say so.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO

from videorl.atomic import atomic_write_text
from videorl.data.files import open_regular, read_regular
from videorl.media.errors import MediaError

_CHUNK = 1 << 20
#: the most bytes of a remembered fingerprint (a few hundred in practice; the cache is not trusted)
_MEMO_LIMIT = 1 << 16


@dataclass(frozen=True)
class SourceFingerprint:
    """A source file's identity: absolute path, size, mtime (ns), inode and content hash."""

    path: str
    size: int
    mtime_ns: int
    inode: int
    sha256: str
    previous_sha256: str | None = None  # the content hash this path had before it last changed


def _sha256(f: BinaryIO) -> str:
    digest = hashlib.sha256()
    while chunk := f.read(_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def content_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of the regular file ``path`` (``MediaError`` for anything else: a FIFO, a device)."""
    with open_regular(path, MediaError) as f:
        return _sha256(f)


def memo_path(memo_dir: Path, source: str) -> Path:
    return memo_dir / f"{hashlib.sha256(source.encode('utf-8', 'surrogateescape')).hexdigest()[:32]}.json"


def read_memo(memo_dir: Path | None, source: str) -> SourceFingerprint | None:
    """The remembered fingerprint of ``source`` (an absolute path), or ``None``."""
    if memo_dir is None:
        return None
    try:
        data = json.loads(read_regular(memo_path(memo_dir, source), _MEMO_LIMIT).decode("utf-8"))
        memo = SourceFingerprint(**data)
    except (OSError, ValueError, TypeError, RecursionError):  # DataError is a ValueError
        return None
    return memo if memo.path == source else None


def fingerprint(source: str | os.PathLike[str], memo_dir: Path | None = None) -> SourceFingerprint:
    """Fingerprint ``source``, reusing the hash remembered under ``memo_dir`` while size, mtime and
    inode are unchanged. Raises ``MediaError`` when the file is missing, unreadable or not a regular
    file (a FIFO or a device is never read)."""
    path = os.path.abspath(source)
    with open_regular(path, MediaError) as f:  # checked before a byte is read: a regular file only
        st = os.fstat(f.fileno())
        memo = read_memo(memo_dir, path)
        if memo and (memo.size, memo.mtime_ns, memo.inode) == (st.st_size, st.st_mtime_ns, st.st_ino):
            return memo
        try:
            sha = _sha256(f)
        except OSError as exc:
            raise MediaError(f"{path}: cannot read ({exc.strerror or exc})") from None
    previous = memo.previous_sha256 if memo else None
    if memo and memo.sha256 != sha:
        previous = memo.sha256
    fp = SourceFingerprint(path, st.st_size, st.st_mtime_ns, st.st_ino, sha, previous)
    if memo_dir is not None:
        try:
            memo_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(memo_path(memo_dir, path), json.dumps(asdict(fp)))
        except OSError:  # a read-only cache still serves; the hash is just not remembered
            pass
    return fp
