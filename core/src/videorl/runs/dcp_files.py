"""DCP (``torch.distributed.checkpoint``) files as :mod:`videorl.runs.checkpoint` writes and reads them:
read without running pickled code, written with the ``OSError`` of a failed write kept.

DCP's own reader calls ``pickle.load`` on a checkpoint's ``.metadata`` (pytorch/pytorch#189308) and
``torch.load(weights_only=False)`` on its non-tensor values, so a checkpoint directory from elsewhere
could run code at resume or export. Here ``.metadata`` goes through an unpickler that accepts DCP's own
metadata classes and nothing else, and non-tensor values through ``torch.load(weights_only=True)``
(tensor data DCP itself reads with ``weights_only=True``). What DCP then passes between the ranks of a
load (the metadata, the plans) is pickled among the run's own processes, never read from disk.
"""

from __future__ import annotations

import io
import os
import pickle
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def safe_reader(path: Path) -> FileSystemReader:
    """A DCP ``FileSystemReader`` of ``path`` whose metadata goes through :class:`_MetadataUnpickler`."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
            with open(Path(self.path) / ".metadata", "rb") as f:
                metadata = _MetadataUnpickler(f).load()
            if not isinstance(metadata, Metadata):
                raise pickle.UnpicklingError(f"{path}/.metadata holds a {type(metadata).__name__}")
            storage = metadata.storage_meta or StorageMeta()
            storage.load_id = self.load_id
            metadata.storage_meta = storage
            return metadata

    return SafeReader(path)


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
