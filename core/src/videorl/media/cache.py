"""The content-addressed frame cache: decode once, store as safetensors, load memory-mapped where used.

Layout under the cache root::

    entries/<ab>/<source>-<params>.safetensors   uint8 frames T×3×H×W, metadata in the header
    sources/<hash of path>.json                  remembered fingerprints of source files
    entries/<ab>/<key>.safetensors.broken        a load found that entry damaged (the next build checks it)

An entry's key is ``<source>-<params>``: ``source`` is the SHA-256 of the video's content (so a video
replaced at the same path never hits a stale entry, and identical videos under different paths share
one entry) and ``params`` hashes every decoding parameter with the cache format version. The header
holds the parameters, the :class:`VideoMetadata`, the source and a CRC-32 over frames and header
fields; every load checks it, so a truncated or corrupted entry is never handed to a model. Writes go
through a temporary file and a rename. Nothing is unpickled: safetensors and JSON only. The listings
that ``cache verify``, ``stats`` and ``gc`` act on never follow a symbolic link (a linked folder or file
under the cache may point anywhere).

Only a :class:`MediaRef` (source path + key) travels between processes; each consumer calls
:meth:`MediaCache.load`, which maps the file and returns the frames.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shlex
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np

from videorl.atomic import atomic_write, atomic_write_text, is_stale_temp, is_temp
from videorl.errors import ConfigError
from videorl.media.decode import decode_video
from videorl.media.errors import (
    CacheMissError,
    CorruptEntryError,
    MediaError,
    ParamsMismatchError,
    SourceChangedError,
)
from videorl.media.fingerprint import SourceFingerprint, fingerprint, read_memo
from videorl.media.metadata import VideoMetadata
from videorl.media.params import RANGE_FIELDS, DecodeParams

if TYPE_CHECKING:
    import torch

log = logging.getLogger("videorl.media")

CACHE_FORMAT = "videorl-frames"
CACHE_FORMAT_VERSION = 1
ENTRY_SUFFIX = ".safetensors"
#: appended to an entry's name for the note a load leaves when it found the entry damaged
BROKEN_SUFFIX = ".broken"
SourceMode = Literal["preprocessed_only", "prefer_preprocessed", "realtime_only"]
SOURCE_MODES: tuple[str, ...] = get_args(SourceMode)
_SOURCE_ID_LEN = 32
#: how long a temporary file whose writer cannot be checked (another machine's) is left alone
TEMP_GRACE_SECONDS = 3600.0


def params_id(params: DecodeParams) -> str:
    """The hash of the decoding parameters and the cache format version (16 hex digits)."""
    text = f"{CACHE_FORMAT}/{CACHE_FORMAT_VERSION}\n{params.to_json()}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_key(source_sha256: str, params: DecodeParams) -> str:
    """The key of the entry for content ``source_sha256`` decoded with ``params``."""
    return f"{source_sha256[:_SOURCE_ID_LEN]}-{params_id(params)}"


@dataclass(frozen=True)
class MediaRef:
    """What travels between processes instead of frames: the source path and the cache key.

    ``key`` is ``None`` when frames are decoded on the fly (``realtime_only``). JSON-able with
    :meth:`to_dict`; picklable.
    """

    source: str
    key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "key": self.key}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MediaRef:
        return cls(source=str(d["source"]), key=d.get("key"))


@dataclass(frozen=True)
class EntryInfo:
    """An entry's header, read without touching its frames."""

    path: Path
    key: str
    params: DecodeParams
    metadata: VideoMetadata
    source: dict[str, Any]
    checksum: str
    size: int

    @property
    def shape(self) -> tuple[int, int, int, int]:
        m = self.metadata
        return (m.num_frames, 3, m.height, m.width)


def _checksum(frames: Any, header: dict[str, str]) -> str:
    crc = zlib.crc32(frames)
    for name in ("key", "params", "metadata", "source"):
        crc = zlib.crc32(header[name].encode(), crc)
    return f"crc32:{crc:08x}"


def _parse_header(path: Path, header: dict[str, str] | None, size: int) -> EntryInfo:
    if not header or header.get("format") != CACHE_FORMAT:
        raise CorruptEntryError(f"{path}: not a videorl frame-cache entry")
    version = header.get("format_version")
    if version != str(CACHE_FORMAT_VERSION):
        raise CorruptEntryError(
            f"{path}: cache format version {version}, this videorl reads {CACHE_FORMAT_VERSION}; rebuild it"
        )
    try:
        return EntryInfo(
            path=path,
            key=header["key"],
            params=DecodeParams.from_dict(json.loads(header["params"])),
            metadata=VideoMetadata.from_dict(json.loads(header["metadata"])),
            source=json.loads(header["source"]),
            checksum=header["checksum"],
            size=size,
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise CorruptEntryError(f"{path}: unreadable header ({type(exc).__name__}: {exc})") from None


def read_header(path: Path) -> EntryInfo:
    """The header of an entry (no frames read); ``CorruptEntryError`` if it is not a valid entry."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as f:
            header = f.metadata()
        return _parse_header(path, header, path.stat().st_size)
    except (SafetensorError, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise CorruptEntryError(f"{path}: truncated or not a safetensors file ({exc})") from None


def check_header(path: Path, key: str, params: DecodeParams) -> EntryInfo:
    """The header of the entry at ``path`` after checking that it is the entry of ``key`` for ``params``
    (no frames read); ``CorruptEntryError`` otherwise."""
    info = read_header(path)
    if info.key != key or path.name != key + ENTRY_SUFFIX or key.split("-")[-1] != params_id(info.params):
        raise CorruptEntryError(f"{path}: key {info.key} does not match the file name or its parameters")
    if info.params != params:
        raise CorruptEntryError(f"{path}: its header holds other decoding parameters than its key says")
    return info


def _regular_files(folder: Path) -> Iterator[os.DirEntry[str]]:
    """The plain files directly in ``folder`` (links skipped; nothing when ``folder`` is a link)."""
    if folder.is_symlink() or not folder.is_dir():
        return
    with os.scandir(folder) as it:
        yield from (e for e in it if e.is_file(follow_symlinks=False))


def _scan(top: Path) -> Iterator[os.DirEntry[str]]:
    """Everything under ``top``, without entering linked folders (nothing when ``top`` is a link)."""
    if top.is_symlink() or not top.is_dir():
        return
    stack = [str(top)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                yield entry
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)


def _subfolders(folder: Path) -> Iterator[Path]:
    """The folders directly in ``folder``, linked ones skipped."""
    if folder.is_symlink() or not folder.is_dir():
        return
    with os.scandir(folder) as it:
        yield from (Path(e.path) for e in it if e.is_dir(follow_symlinks=False))


def read_entry(path: Path, *, framework: Literal["pt", "numpy"] = "pt") -> tuple[Any, EntryInfo]:
    """Frames and header of an entry, after checking shape, key and checksum.

    With ``framework="pt"`` the tensor maps the file (no copy); the checksum pass reads it once.
    Raises ``FileNotFoundError`` when absent and ``CorruptEntryError`` when it cannot be trusted.
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework=framework) as f:
            header = f.metadata()
            names = list(f.keys())
            if names != ["frames"]:
                raise CorruptEntryError(f"{path}: holds tensors {names}, expected only 'frames'")
            frames = f.get_tensor("frames")
        info = _parse_header(path, header, path.stat().st_size)
    except (SafetensorError, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise CorruptEntryError(f"{path}: truncated or not a safetensors file ({exc})") from None
    array = frames.numpy() if framework == "pt" else frames
    if array.dtype != np.uint8 or tuple(array.shape) != info.shape:
        raise CorruptEntryError(
            f"{path}: frames are {array.dtype} {tuple(array.shape)}, the header says uint8 {info.shape}"
        )
    if path.name != info.key + ENTRY_SUFFIX or info.key.split("-")[-1] != params_id(info.params):
        raise CorruptEntryError(f"{path}: key {info.key} does not match the file name or its parameters")
    if _checksum(np.ascontiguousarray(array), header) != info.checksum:
        raise CorruptEntryError(f"{path}: checksum mismatch: the entry is corrupted")
    return frames, info


class MediaCache:
    """Frames for (source, parameters), from the cache or decoded, according to the source ``mode``:

    - ``preprocessed_only``: only cached entries; a missing one is an error that says how to build it;
    - ``prefer_preprocessed``: cached entries, else decode, store and return (built on first use);
    - ``realtime_only``: always decode, never read or write the cache (``root`` may be ``None``).

    In the two cached modes, asking for a source whose entries exist only for other parameters is
    an error naming the parameters that differ (``strict_params=False`` builds the new entry instead).
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None,
        mode: SourceMode = "prefer_preprocessed",
        *,
        strict_params: bool = True,
        threads: int = 0,
    ) -> None:
        if mode not in SOURCE_MODES:
            raise ConfigError(f"unknown video source mode {mode!r}; choose one of {', '.join(SOURCE_MODES)}")
        if root is None and mode != "realtime_only":
            raise ConfigError(f"source mode {mode!r} needs a cache directory")
        self.root = Path(root) if root is not None else None
        self.mode = mode
        self.strict_params = strict_params
        self.threads = threads

    # --- layout -------------------------------------------------------------------------------

    @property
    def _root(self) -> Path:
        assert self.root is not None
        return self.root

    @property
    def entries_dir(self) -> Path:
        return self._root / "entries"

    @property
    def sources_dir(self) -> Path:
        return self._root / "sources"

    def entry_path(self, key: str) -> Path:
        return self.entries_dir / key[:2] / f"{key}{ENTRY_SUFFIX}"

    def entry_paths(self) -> Iterator[Path]:
        """Every entry file, sorted (symbolic links, and entries in linked folders, are not listed)."""
        found = [
            Path(e.path)
            for shard in _subfolders(self.entries_dir)
            for e in _regular_files(shard)
            if e.name.endswith(ENTRY_SUFFIX) and not is_temp(e.name)
        ]
        yield from sorted(found)

    def temp_files(self) -> list[Path]:
        """Temporary files of writers: killed before their rename, or still writing (links not followed)."""
        if self.root is None or not self.root.exists():
            return []
        return sorted(
            Path(e.path)
            for top in _subfolders(self.root)
            for e in _scan(top)
            if e.is_file(follow_symlinks=False) and is_temp(e.name)
        )

    def leftover_temp_files(self, grace: float = TEMP_GRACE_SECONDS) -> list[Path]:
        """The temporary files that may be deleted: their writer is dead, or, when that cannot be told
        (another machine wrote it), untouched for ``grace`` seconds. A live writer's are never listed."""
        return [p for p in self.temp_files() if is_stale_temp(p, grace)]

    def broken_notes(self) -> list[Path]:
        """The notes of entries a load found damaged (see :meth:`build`)."""
        return sorted(
            Path(e.path)
            for shard in _subfolders(self.entries_dir)
            for e in _regular_files(shard)
            if e.name.endswith(ENTRY_SUFFIX + BROKEN_SUFFIX)
        )

    def source_memos(self) -> list[Path]:
        """The remembered fingerprints under ``sources/`` (links skipped)."""
        return sorted(Path(e.path) for e in _regular_files(self.sources_dir) if e.name.endswith(".json"))

    def links(self) -> list[Path]:
        """Symbolic links under ``entries/`` and ``sources/``: never followed by the listings above."""
        tops = (self.entries_dir, self.sources_dir)
        found = [p for p in tops if p.is_symlink()]
        found += [Path(e.path) for top in tops for e in _scan(top) if e.is_symlink()]
        return sorted(found)

    def entries_for_source(self, source_sha256: str) -> list[Path]:
        prefix = source_sha256[:_SOURCE_ID_LEN]
        return sorted((self.entries_dir / prefix[:2]).glob(f"{prefix}-*{ENTRY_SUFFIX}"))

    # --- resolving ------------------------------------------------------------------------------

    def fingerprint(self, source: str | os.PathLike[str]) -> SourceFingerprint:
        """The source's fingerprint (remembered under ``sources/``). In ``preprocessed_only`` mode a
        missing source file is looked up in the remembered fingerprints, so a copied cache serves
        training without the raw videos."""
        try:
            return fingerprint(source, self.sources_dir)
        except MediaError:
            memo = read_memo(self.sources_dir, os.path.abspath(source))
            if self.mode == "preprocessed_only" and memo is not None:
                return memo
            raise

    def resolve(self, source: str | os.PathLike[str], params: DecodeParams) -> MediaRef:
        """The reference to hand to consumers. Checks what can be checked early: in
        ``preprocessed_only`` mode the entry must exist; entries for other parameters are an error."""
        path = os.path.abspath(source)
        if self.mode == "realtime_only":
            return MediaRef(path)
        fp = self.fingerprint(path)
        ref = MediaRef(path, cache_key(fp.sha256, params))
        if not self.entry_path(ref.key or "").exists():
            self._check_missing(fp, params)
        return ref

    def _check_missing(self, fp: SourceFingerprint, params: DecodeParams) -> None:
        """Raise the right error for a missing entry, or return when it may be built."""
        own = self.entry_path(cache_key(fp.sha256, params))
        others = [p for p in self.entries_for_source(fp.sha256) if p != own]
        if others and (self.strict_params or self.mode == "preprocessed_only"):
            diffs = [
                {k: v for k, v in d.items() if k not in RANGE_FIELDS} for d in _differences(others, params)
            ]
            if all(diffs):  # an entry differing in its time range alone has this run's budget
                raise self._mismatch(fp.path, diffs, params)
        if self.mode != "preprocessed_only":
            return
        if fp.previous_sha256 and self.entries_for_source(fp.previous_sha256):
            raise SourceChangedError(
                f"{fp.path}: the video changed since the cache was built (content sha256 "
                f"{fp.previous_sha256[:12]}… is now {fp.sha256[:12]}…), so its cached entries are stale. "
                f"Rebuild: {self.build_command(params)}"
            )
        how = (
            "Time-range entries are built on first use in prefer_preprocessed mode"
            if params.has_range
            else f"Build it: {self.build_command(params)}"
        )
        raise CacheMissError(
            f"{fp.path}: not in the cache {self.root} for these parameters ({params.to_json()}), and the "
            f"source mode is preprocessed_only. {how}"
        )

    def _mismatch(
        self, source: str, diffs: list[dict[str, tuple[Any, Any]]], params: DecodeParams
    ) -> ParamsMismatchError:
        """The error for a source cached only with other parameters; ``diffs`` are the readable entries'
        :meth:`DecodeParams.differences` from ``params`` (none: only damaged entries)."""
        if not diffs:
            return ParamsMismatchError(
                f"{source}: the cache holds only damaged entries of this video, for other parameters; "
                f"remove them with: videorl cache verify {self.root} --delete-bad"
            )
        best = min(diffs, key=len)
        what = ", ".join(
            f"{k}={cached!r} (this run: {wanted!r})" for k, (cached, wanted) in sorted(best.items())
        )
        return ParamsMismatchError(
            f"{source}: the cache {self.root} holds this video only for other decoding parameters: {what}. "
            f"Build entries for this run's parameters (videorl cache build ... {_cli_flags(params)}) or "
            f"set the run's video parameters to the cached ones."
        )

    def build_command(self, params: DecodeParams) -> str:
        """The ``videorl cache build`` command line that (re)builds entries for ``params`` here."""
        return f"videorl cache build DATA --cache-dir {shlex.quote(str(self.root))} {_cli_flags(params)}"

    # --- loading --------------------------------------------------------------------------------

    def load(
        self, ref: MediaRef | str | os.PathLike[str], params: DecodeParams
    ) -> tuple[torch.Tensor, VideoMetadata]:
        """uint8 frames ``T×3×H×W`` (a torch tensor mapping the entry) and their metadata."""
        import torch

        frames, meta = self._load(ref, params, "pt")
        return (torch.from_numpy(frames) if isinstance(frames, np.ndarray) else frames), meta

    def load_numpy(
        self, ref: MediaRef | str | os.PathLike[str], params: DecodeParams
    ) -> tuple[np.ndarray, VideoMetadata]:
        """As :meth:`load`, as a numpy array (a copy; no torch needed)."""
        frames, meta = self._load(ref, params, "numpy")
        return frames, meta

    def _load(
        self, ref: MediaRef | str | os.PathLike[str], params: DecodeParams, framework: Literal["pt", "numpy"]
    ) -> tuple[Any, VideoMetadata]:
        if not isinstance(ref, MediaRef):
            ref = self.resolve(ref, params)
        if self.mode == "realtime_only" or ref.key is None:
            return decode_video(ref.source, params, threads=self.threads)
        path = self.entry_path(ref.key)
        try:
            frames, info = read_entry(path, framework=framework)
        except FileNotFoundError:
            if self.mode == "preprocessed_only":
                self._check_missing(self.fingerprint(ref.source), params)
            ref = self.get_or_build(ref.source, params)
            frames, info = read_entry(self.entry_path(ref.key or ""), framework=framework)
        except CorruptEntryError as exc:
            if self.mode == "preprocessed_only":
                self.note_broken(path, str(exc))
                raise CorruptEntryError(
                    f"{exc} (source {ref.source}). Rebuild it (the build checks and replaces this entry): "
                    f"{self.build_command(params)}"
                ) from None
            log.warning("%s; rebuilding it from %s", exc, ref.source)
            path.unlink(missing_ok=True)
            ref = self.get_or_build(ref.source, params)
            frames, info = read_entry(self.entry_path(ref.key or ""), framework=framework)
        if info.params != params:
            raise self._mismatch(ref.source, [info.params.differences(params)], params)
        return frames, info.metadata

    @staticmethod
    def note_broken(path: Path, reason: str) -> None:
        """Leave a note that the entry at ``path`` is damaged, for the next build (a read-only cache keeps
        none; the build then finds the damage with ``--verify``)."""
        with contextlib.suppress(OSError):
            atomic_write_text(path.with_name(path.name + BROKEN_SUFFIX), reason + "\n")

    # --- building -------------------------------------------------------------------------------

    def get_or_build(self, source: str | os.PathLike[str], params: DecodeParams) -> MediaRef:
        """The reference of an entry that exists: built now (atomically) unless already present."""
        ref, _ = self.build(source, params)
        return ref

    def build(
        self,
        source: str | os.PathLike[str],
        params: DecodeParams,
        *,
        check: bool = False,
        verify: bool = False,
    ) -> tuple[MediaRef, bool]:
        """Ensure the entry for ``source`` exists; return its reference and whether it was decoded now.

        With ``check`` (``videorl cache build``) an existing entry's header and key are checked, and its
        frames and checksum too when ``verify`` or when a load left a note that it is damaged; a damaged
        entry is rebuilt. Otherwise existence suffices. Loads check the full checksum every time.
        """
        if self.mode != "prefer_preprocessed":
            raise ConfigError(
                f"source mode {self.mode} does not build cache entries (prefer_preprocessed does)"
            )
        fp = self.fingerprint(source)
        key = cache_key(fp.sha256, params)
        path = self.entry_path(key)
        note = path.with_name(path.name + BROKEN_SUFFIX)
        if path.exists():
            if not check:
                return MediaRef(fp.path, key), False
            try:
                check_header(path, key, params)
                if verify or note.exists():
                    read_entry(path, framework="numpy")
                note.unlink(missing_ok=True)
                return MediaRef(fp.path, key), False
            except CorruptEntryError as exc:
                log.warning("%s; rebuilding it", exc)
                path.unlink(missing_ok=True)
        self._check_missing(fp, params)
        frames, meta = decode_video(fp.path, params, threads=self.threads)
        self.write(key, frames, meta, params, fp)
        note.unlink(missing_ok=True)
        return MediaRef(fp.path, key), True

    def write(
        self, key: str, frames: np.ndarray, meta: VideoMetadata, params: DecodeParams, fp: SourceFingerprint
    ) -> Path:
        """Store an entry atomically (temporary file, fsync, rename) and return its path."""
        from safetensors.numpy import save_file

        frames = np.ascontiguousarray(frames, dtype=np.uint8)
        header = {
            "format": CACHE_FORMAT,
            "format_version": str(CACHE_FORMAT_VERSION),
            "key": key,
            "params": params.to_json(),
            "metadata": json.dumps(meta.to_dict(), sort_keys=True),
            "source": json.dumps({"sha256": fp.sha256, "size": fp.size, "path": fp.path}, sort_keys=True),
        }
        header["checksum"] = _checksum(frames, header)
        path = self.entry_path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp: save_file({"frames": frames}, str(tmp), metadata=header))
        return path


def _differences(entries: list[Path], params: DecodeParams) -> list[dict[str, tuple[Any, Any]]]:
    """How the parameters of each readable entry in ``entries`` differ from ``params``."""
    diffs: list[dict[str, tuple[Any, Any]]] = []
    for path in entries:
        try:
            diffs.append(read_header(path).params.differences(params))
        except (CorruptEntryError, FileNotFoundError):
            continue
    return diffs


def _cli_flags(params: DecodeParams) -> str:
    flags = [
        f"--factor {params.factor}",
        f"--temporal-patch-size {params.temporal_patch_size}",
        f"--fps {params.fps:g}",
        f"--max-frames {params.max_frames}",
        f"--min-frames {params.min_frames}",
        f"--min-pixels {params.min_pixels}",
        f"--max-pixels {params.max_pixels}",
        f"--interpolation {params.interpolation}",
    ]
    if params.total_pixels is not None:
        flags.append(f"--total-pixels {params.total_pixels}")
    return " ".join(flags)
