"""DCP (``torch.distributed.checkpoint``) files as :mod:`videorl.runs.checkpoint` writes and reads them:
read without running pickled code, written with the ``OSError`` of a failed write kept.

DCP's own reader calls ``pickle.load`` on a checkpoint's ``.metadata`` (pytorch/pytorch#189308) and
``torch.load(weights_only=False)`` on its non-tensor values, so a checkpoint directory from elsewhere
could run code at resume or export. Here ``.metadata`` goes through an unpickler that accepts DCP's own
metadata classes and nothing else, and non-tensor values through ``torch.load(weights_only=True)``
(tensor data DCP itself reads with ``weights_only=True``). What DCP then passes between the ranks of a
load (the metadata, the plans) is pickled among the run's own processes, never read from disk.

The metadata also says which file holds which bytes, how large each tensor is and how to nest the state
dict again: it may name only the tensor files that ``state.json`` checksums (never an absolute path or
``..``), byte ranges inside them, tensors that fit in their bytes, and list indices no larger than its
own entries (DCP appends up to each one), all checked before DCP reads or allocates anything
(:func:`check_metadata`).
"""

from __future__ import annotations

import io
import os
import pickle
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.runs.manifest import CheckpointError

if TYPE_CHECKING:
    from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
    from torch.distributed.checkpoint.planner import LoadPlanner, ReadItem


def quiet_single_process() -> None:
    """DCP warns at every call without a process group (and in its writer thread) that it assumes one
    process: that is the intent here, so the warning is noise in every one-process run's log."""
    warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")


_METADATA_CLASSES = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "TensorProperties",
        "MetadataIndex",
        "StorageMeta",
        "_MEM_FORMAT_ENCODING",
    },
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath"},
}


class _MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP's ``.metadata``: its own dataclasses, ``torch.Size``, dtypes and paths, nothing else
    (a pickle naming any other callable is refused before anything runs)."""

    def find_class(self, module: str, name: str) -> Any:
        import torch

        if name in _METADATA_CLASSES.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"Unsupported global: GLOBAL {module}.{name}")


#: the most bytes a ``.metadata`` may hold (a 70B model's over 512 ranks: ~200 MB)
MAX_METADATA_BYTES = 1 << 30
#: how deep a state dict may nest (DCP flattens it; each key's path in ``planner_data``)
MAX_DEPTH = 64


def safe_reader(path: Path, files: Mapping[str, int]) -> FileSystemReader:
    """A DCP ``FileSystemReader`` of ``path`` whose metadata goes through :class:`_MetadataUnpickler` and
    :func:`check_metadata`: it may open only ``files`` (name in ``path``: size), the tensor files that
    the checkpoint's ``state.json`` checksums."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
            where = Path(self.path) / ".metadata"
            if ".metadata" not in files:
                raise MetadataError(f"{where}: not checksummed by the checkpoint's state.json")
            fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                if os.fstat(fd).st_size > MAX_METADATA_BYTES:
                    raise MetadataError(f"{where} is over {MAX_METADATA_BYTES:,} bytes")
                metadata = _MetadataUnpickler(f).load()
            if not isinstance(metadata, Metadata):
                raise pickle.UnpicklingError(f"{path}/.metadata holds a {type(metadata).__name__}")
            check_metadata(where, metadata, files)
            storage = metadata.storage_meta or StorageMeta()
            storage.load_id = self.load_id
            metadata.storage_meta = storage
            return metadata

    return SafeReader(path)


class MetadataError(ValueError):
    """A DCP ``.metadata`` names a file, a range or a size it may not (the message names it)."""


def check_metadata(where: Path, metadata: Any, files: Mapping[str, int]) -> None:
    """Raise :class:`MetadataError` unless every storage entry of ``metadata`` is a byte range of one of
    ``files`` (no transform), every tensor fits in their bytes, and ``planner_data`` rebuilds a state
    dict no larger than it names; each entry is visited once."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    data = metadata.storage_data
    if not isinstance(data, dict):
        raise MetadataError(f"{where}: storage_data is a {type(data).__name__}, not a mapping")
    for index, info in data.items():
        if not isinstance(info, _StorageInfo) or not isinstance(info.relative_path, str):
            raise MetadataError(f"{where}: the storage entry of {index} is not DCP's")
        if info.relative_path not in files or info.relative_path == ".metadata":
            raise MetadataError(
                f"{where}: names the file {info.relative_path!r}, which the checkpoint's state.json does not "
                "checksum (only its own tensor files are read); it has been tampered with"
            )
        start, length = info.offset, info.length
        if not (type(start) is int and type(length) is int and start >= 0 and length >= 0):
            raise MetadataError(f"{where}: the storage entry of {index} has no valid byte range")
        if start + length > files[info.relative_path] or info.transform_descriptors:
            raise MetadataError(f"{where}: the storage entry of {index} reads past {info.relative_path}")
    _check_sizes(where, metadata.state_dict_metadata, sum(files.values()))
    _check_planner_data(where, metadata.planner_data, len(metadata.state_dict_metadata))


def _check_sizes(where: Path, entries: Any, total: int) -> None:
    """Every tensor ``entries`` declares fits in ``total`` bytes (DCP allocates it whole before reading)."""
    import math

    import torch
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, TensorStorageMetadata

    if not isinstance(entries, dict):
        raise MetadataError(f"{where}: state_dict_metadata is a {type(entries).__name__}, not a mapping")
    for key, entry in entries.items():
        if isinstance(entry, BytesStorageMetadata):
            continue
        dtype = getattr(getattr(entry, "properties", None), "dtype", None)
        if not isinstance(entry, TensorStorageMetadata) or not isinstance(dtype, torch.dtype):
            raise MetadataError(f"{where}: the entry of {key!r} is not DCP's")
        size = tuple(entry.size)
        if not all(type(n) is int and n >= 0 for n in size) or len(size) > MAX_DEPTH:
            raise MetadataError(f"{where}: {key!r} has the invalid shape {list(size)[:8]}")
        if math.prod(size) * dtype.itemsize > total:
            raise MetadataError(
                f"{where}: {key!r} is declared {list(size)}, more than the {total:,} bytes of its files"
            )


def _check_planner_data(where: Path, planner_data: Any, keys: int) -> None:
    """``planner_data`` (each flattened key's path in the nested state dict) names lists no longer than it
    has entries: DCP appends ``None`` up to each index it names when it rebuilds the state dict."""
    if planner_data is None:
        return
    if not isinstance(planner_data, dict) or len(planner_data) > keys:
        raise MetadataError(f"{where}: planner_data is not one path per key")
    longest: dict[tuple[Any, ...], int] = {}  # each list's prefix: its highest index
    for key, path in planner_data.items():
        if not isinstance(path, tuple) or not 0 < len(path) <= MAX_DEPTH:
            raise MetadataError(f"{where}: the path of {key!r} in planner_data is not a tuple of keys")
        for depth, part in enumerate(path):
            if type(part) is int and part >= 0:
                prefix = path[:depth]
                longest[prefix] = max(longest.get(prefix, -1), part)
            elif type(part) is not str:
                raise MetadataError(f"{where}: the path of {key!r} in planner_data holds {part!r}")
    if sum(n + 1 for n in longest.values()) > 2 * keys + 1024:
        raise MetadataError(f"{where}: planner_data names list indices far beyond its {keys} keys")


def safe_planner(*, empty: bool, keys: set[str] | None = None) -> LoadPlanner:
    """A DCP load planner that reads non-tensor values with ``weights_only=True`` (DCP's default runs
    whatever they pickled); ``empty``: it rebuilds the state dict from the metadata (one process)."""
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, _EmptyStateDictLoadPlanner

    class SafeLoadPlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
            _load_bytes(self, read_item, value)

    # DCP's own way to read a checkpoint without a model (its dcp_to_torch_save uses it)
    class SafeEmptyPlanner(_EmptyStateDictLoadPlanner):
        def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
            _load_bytes(self, read_item, value)

    return SafeEmptyPlanner(keys=keys) if empty else SafeLoadPlanner()


def _load_bytes(planner: Any, read_item: ReadItem, value: io.BytesIO) -> None:
    """``DefaultLoadPlanner.load_bytes`` with ``weights_only=True``."""
    import torch
    from torch.distributed.checkpoint._traverse import set_element

    loaded = torch.load(value, weights_only=True)
    if planner.flatten_state_dict:
        set_element(planner.original_state_dict, planner.mappings[read_item.dest_index.fqn], loaded)
    else:
        planner.state_dict[read_item.dest_index.fqn] = loaded


def recording_writer(path: Path) -> tuple[FileSystemWriter, list[OSError]]:
    """A DCP writer into ``path``, and the ``OSError`` of every write of it that failed: ``torch.save``,
    which DCP writes each tensor with, replaces it with "unexpected pos", which would hide a full disk."""
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.filesystem import FileSystem

    errors: list[OSError] = []

    class RecordingFileSystem(FileSystem):
        @contextmanager
        def create_stream(self, path: str | os.PathLike[str], mode: str) -> Iterator[io.IOBase]:
            if "w" not in mode:
                with super().create_stream(path, mode) as stream:
                    yield stream
                return
            with io.BufferedWriter(_RecordingFile(path, errors)) as stream:
                yield stream

    writer = FileSystemWriter(path)
    writer.fs = RecordingFileSystem()
    return writer, errors


class _RecordingFile(io.FileIO):
    """A file opened for writing whose failed writes are appended to ``errors``."""

    def __init__(self, path: str | os.PathLike[str], errors: list[OSError]) -> None:
        super().__init__(path, "wb")
        self.errors = errors

    def write(self, data: Any) -> int:
        try:
            return super().write(data)
        except OSError as exc:
            self.errors.append(exc)
            raise


def check_layout(path: Path, template: dict[str, Any], stored: Mapping[str, Any]) -> None:
    """Raise :class:`CheckpointError` unless ``stored`` (the checkpoint's DCP metadata, by flattened
    key) holds exactly ``template``'s keys, tensors of the same shapes: a LoRA run resuming a full
    fine-tuning checkpoint, the reverse, or other ``actor.lora`` settings."""
    import torch
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    wanted, _ = flatten_state_dict(template)  # the keys DCP's planner reads, as it flattens them
    missing = sorted(set(wanted) - set(stored))
    unexpected = sorted(set(stored) - set(wanted))
    reshaped = [
        f"{key}: {list(stored[key].size)} in the checkpoint, {list(value.shape)} now"
        for key, value in sorted(wanted.items())
        if key in stored
        and isinstance(value, torch.Tensor)
        and isinstance(stored[key], TensorStorageMetadata)
        and tuple(stored[key].size) != tuple(value.shape)
    ]
    if not (missing or unexpected or reshaped):
        return
    parts = [
        f"{len(keys)} {what} ({_few(keys)})"
        for keys, what in (
            (missing, "key(s) of this run are not in it"),
            (unexpected, "key(s) of it are not in this run"),
            (reshaped, "tensor(s) have another shape"),
        )
        if keys
    ]
    raise CheckpointError(
        f"{path} does not match this run's model and optimizer: " + "; ".join(parts) + ". A LoRA "
        "run resumes only a checkpoint written with the same actor.lora settings (enabled, rank, "
        "target_modules), a full fine-tuning run only a full one: compare actor.lora with the "
        f"checkpoint run's {path.parent.parent / 'config.yaml'}, or start a new run"
    )


def _few(items: Sequence[str], shown: int = 3) -> str:
    """The first ``shown`` of ``items``, and how many more."""
    more = f", and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def read_error(path: Path, exc: BaseException) -> CheckpointError:
    """What a failed DCP read of checkpoint ``path`` means: refused pickled objects, or a corrupt file."""
    if isinstance(exc, CheckpointError):
        return exc
    if isinstance(exc, MetadataError):
        return CheckpointError(f"{exc}; it was not written by videorl or has been tampered with")
    text = str(exc)
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
    if found:
        # torch's own message advises weights_only=False, which would run whatever the file holds
        return CheckpointError(
            f"{path}: refused to load: it holds objects other than tensors and plain containers (it names "
            f"{found.group(1)}), so "
            "it was not written by videorl or has been tampered with"
        )
    return CheckpointError(
        f"{path} is corrupt ({type(exc).__name__}: {text.splitlines()[0] if text else ''}); resume from "
        "an earlier checkpoint, or pass --resume with another checkpoint directory"
    )
