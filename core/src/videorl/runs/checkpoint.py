"""Checkpoints of a training run: sharded, written atomically (in the background), resumed from the last
complete one, exported to HF.

Layout under ``<output_dir>/checkpoints``::

    step_000020/
        tensors/            a torch.distributed.checkpoint (DCP) of {"model": ..., "optimizer": ...}:
            __0_0.distcp    the shards rank 0 wrote (under FSDP its shards of every parameter and
            __1_0.distcp    optimizer state; one file per rank), ...
            .metadata       which bytes of which file hold which piece of which tensor (rank 0)
        rng.json            python/numpy/torch RNG states, one entry per rank
        state.json          step, data positions, extra fields, the size and CRC-32 of every file and the
                            rank that wrote each shard (written last)
    latest                  the name of the newest checkpoint (a convenience; resuming scans instead)

Every rank writes its own shards and reads back its own (DCP plans which bytes each rank needs), so no
process ever holds the whole model or optimizer state, and one process (no process group) is rank 0 of
1. :func:`save_checkpoint` copies the states to host memory and returns; a background thread writes
them, then rank 0 writes ``state.json`` and renames the directory into place: a checkpoint is complete,
and ``latest`` names it, only once every rank's files are on disk. The next save (or
``CheckpointManager.wait``) waits for the one in flight and raises what it failed with.

A checkpoint is written into a hidden temporary directory, every file fsynced, then renamed into
place. A writer killed at any point (or a full disk) leaves either no checkpoint for that step or a
complete one: ``resume="auto"`` takes the highest step whose ``state.json`` lists files that all exist
with their recorded sizes and checksums, logs each one it skips, and ignores temporary directories
(removed by the next save). Under a process group each rank checks the checksums of the files it reads
(its own shards and the shared small files), and the ranks agree on the checkpoint they resume from.

A checkpoint read back is untrusted: ``state.json`` and ``rng.json`` are checked field by field and
every file they name must be a regular file inside the checkpoint (:mod:`videorl.runs.manifest`).
Nothing is unpickled beyond plain data: DCP's ``.metadata`` is a pickle, read with an unpickler that
accepts only DCP's own metadata classes, its storage entries may name only the tensor files
``state.json`` checksums and its sizes are bounded by theirs, and its non-tensor values (the optimizer's
``param_groups``) are read with ``torch.load(weights_only=True)`` (:mod:`videorl.runs.dcp_files`); all
after their checksums matched.

Saving and resuming a run's state: :mod:`videorl.runs.resume`; tensor files and RNG states:
:mod:`videorl.runs.tensors`; export: :mod:`videorl.runs.export`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.atomic import DiskFullError, atomic_write_text, disk_full, fsync_dir, fsync_file, is_disk_full
from videorl.errors import ConfigError
from videorl.runs.dcp_files import (
    check_layout,
    quiet_single_process,
    read_error,
    recording_writer,
    safe_planner,
    safe_reader,
)
from videorl.runs.manifest import (
    FORMAT_VERSION,
    MODEL_FILE,
    RNG_FILE,
    SHARD,
    STATE_FILE,
    STEP_DIR,
    TENSORS_DIR,
    CheckpointError,
    check_contents,
    checked_files,
    file_crc32,
    read_manifest,
    read_rng,
    step_of,
)
from videorl.runs.tensors import load_tensors, split_aliases

if TYPE_CHECKING:
    import torch
    from torch.distributed.checkpoint.stateful import Stateful

    from videorl.parallel import Parallel

log = logging.getLogger("videorl.checkpoint")

CHECKPOINT_DIR = "checkpoints"  # in a run directory
LATEST_FILE = "latest"

__all__ = ["CHECKPOINT_DIR", "Checkpoint", "CheckpointError", "CheckpointManager"]


def _process_rank() -> int | None:
    """This process's rank in its process group, or None outside one (it then reads, and checks, all)."""
    import sys

    if "torch.distributed" not in sys.modules:  # never joined a group: do not import torch for that
        return None
    import torch.distributed as tdist

    return tdist.get_rank() if tdist.is_available() and tdist.is_initialized() else None


# --- checkpoints ----------------------------------------------------------------------------------


@dataclass
class Checkpoint:
    """A complete checkpoint on disk; tensors are read when asked for."""

    path: Path
    step: int
    data_state: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    format: int = FORMAT_VERSION
    aliases: dict[str, str] = field(default_factory=dict)  # tied names: {alias: stored name}
    #: the tensor files ``state.json`` checksums, with their sizes (None: read from it when needed)
    files: dict[str, int] | None = None

    def model_state(self) -> dict[str, torch.Tensor]:
        """The whole model state dict in host memory, in one process (tied names point to one tensor)."""
        if self.format == 1:
            return load_tensors(self.path / MODEL_FILE)
        state: dict[str, torch.Tensor] = self._read_whole("model") or {}
        self._tie(state)
        return state

    def optimizer_state(self) -> dict[str, Any] | None:
        """The whole optimizer state dict (``None`` when none was saved), in one process."""
        self.require_sharded("its optimizer state")
        return self._read_whole("optimizer")

    def _read_whole(self, key: str) -> Any:
        """Entry ``key`` of the DCP checkpoint, whole, rebuilt from its metadata (no process group)."""
        from torch.distributed.checkpoint.api import CheckpointException
        from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

        tensors = self.path / TENSORS_DIR
        try:
            reader = self._reader()
            if not any(
                k == key or k.startswith(f"{key}.") for k in reader.read_metadata().state_dict_metadata
            ):
                return None
            state: dict[str, Any] = {}
            # the public dcp.load fills only keys already in the dict; this is its loader
            quiet_single_process()
            _load_state_dict(state, storage_reader=reader, planner=safe_planner(empty=True, keys={key}),
                             no_dist=True)  # fmt: skip
        except FileNotFoundError:
            raise CheckpointError(f"{self.path} is incomplete: {TENSORS_DIR}/ is missing") from None
        except (Exception, CheckpointException) as exc:
            raise read_error(tensors, exc) from None
        return state[key]

    def load_into(self, state: Stateful, dist: Parallel, group: Any = None) -> None:
        """Read this checkpoint's tensors into ``state`` (a collective over ``group``, default the
        default group: each rank reads its shards)."""
        from torch.distributed.checkpoint import load
        from torch.distributed.checkpoint.api import CheckpointException

        self.require_sharded("it")
        template = state.state_dict()
        model = template.get("model", {})
        for alias in self.aliases:
            model.pop(alias, None)
        tensors = self.path / TENSORS_DIR
        try:
            reader = self._reader()
            stored = reader.read_metadata().state_dict_metadata
        except FileNotFoundError:
            raise CheckpointError(f"{self.path} is incomplete: {TENSORS_DIR}/.metadata is missing") from None
        except Exception as exc:
            raise read_error(tensors, exc) from None
        # before DCP's "missing key" or size mismatch, which would read as a corrupt checkpoint
        check_layout(self.path, template, stored)
        try:
            quiet_single_process()
            load(template, storage_reader=reader, planner=safe_planner(empty=False),
                 process_group=group, no_dist=dist.world_size == 1)  # fmt: skip
        except (Exception, CheckpointException) as exc:
            raise read_error(tensors, exc) from None
        self._tie(model)
        state.load_state_dict(template)

    def require_sharded(self, what: str) -> None:
        """Raise :class:`CheckpointError`, saying what to do, for a checkpoint of the unsharded format 1."""
        if self.format == 1:
            raise CheckpointError(
                f"{self.path} was written by an earlier videorl (format 1: one model.safetensors and "
                f"optimizer.pt); this version resumes only sharded checkpoints, so {what} cannot be read. "
                f"Export its model (`videorl export {self.path} OUT`) and start a new run from OUT "
                "(model.path=OUT; the optimizer state starts afresh)"
            )

    def rank_data_states(self, world_size: int, advice: str) -> list[dict[str, Any]]:
        """The data position of each rank that wrote this checkpoint; a :class:`ConfigError` unless they
        are ``world_size`` (``advice``, formatted with ``n`` the count written, says how to resume)."""

        ranks: list[dict[str, Any]] = self.data_state.get("ranks", [])
        if len(ranks) != world_size:
            raise ConfigError(
                f"{self.path} was written by {len(ranks)} rank(s); resume it with "
                f"{advice.format(n=len(ranks))} "
                f"(now {world_size})"
            )
        return ranks

    def rng_state(self, rank: int = 0) -> dict[str, Any] | None:
        """The RNG state saved for ``rank`` (``None`` when none was saved), each field of its type."""
        return read_rng(self.path, rank)

    def _reader(self) -> Any:
        """A DCP reader of this checkpoint that may open only the tensor files ``state.json`` checksums."""
        if self.files is None:
            self.files = checked_files(read_manifest(self.path))
        return safe_reader(self.path / TENSORS_DIR, self.files)

    def _tie(self, state: dict[str, Any]) -> None:
        """Point each alias of ``state`` to the tensor it is tied to."""
        for alias, name in self.aliases.items():
            if name not in state:
                raise CheckpointError(f"{self.path}/{STATE_FILE}: alias {alias!r} names a missing {name!r}")
            state[alias] = state[name]


class CheckpointManager:
    """Writes, finds, prunes and loads the checkpoints under ``root``; one write may be in flight."""

    def __init__(self, root: str | Path, *, keep_last: int = 0) -> None:
        self.root = Path(root)
        self.keep_last = keep_last
        self._reported: set[str] = set()  # skipped checkpoints already logged (one line each)
        self._verified: set[Path] = set()  # checkpoints whose contents matched their checksums
        self._pending: Future[Path] | None = None  # the write in flight
        self._writer: ThreadPoolExecutor | None = None  # the thread that finishes background writes
        self._group: Any = None  # the gloo group of this manager's collectives (multi-process runs)

    def path_for(self, step: int) -> Path:
        return self.root / f"step_{step:06d}"

    def save(
        self,
        step: int,
        *,
        model_state: Mapping[str, torch.Tensor],
        optimizer_state: Mapping[str, Any] | None = None,
        data_state: Mapping[str, Any] | None = None,
        rng: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write the checkpoint of ``step`` from whole state dicts, in this process alone, and wait for it.

        ``data_state`` and ``extra`` must be JSON-serialisable; ``rng`` is one state of
        :func:`capture_rng_state` or one per rank. DCP stores dict keys as strings: an optimizer state
        reads back as it is written only keyed by parameter name (``get_optimizer_state_dict``, as
        :class:`ActorState` gives it), not by ``Optimizer.state_dict``'s integers.
        """
        from videorl.parallel import Parallel

        tensors: dict[str, Any] = {"model": dict(model_state)}
        if optimizer_state is not None:
            tensors["optimizer"] = dict(optimizer_state)
        ranks = None if rng is None else [dict(rng)] if isinstance(rng, Mapping) else [dict(r) for r in rng]
        self.write(step, tensors, Parallel(), data=data_state, rng=ranks, extra=extra, asynchronous=False)
        return self.path_for(step)

    def write(
        self,
        step: int,
        tensors: dict[str, Any],
        dist: Parallel,
        *,
        data: Mapping[str, Any] | None = None,
        rng: Sequence[Mapping[str, Any]] | None = None,
        extra: Mapping[str, Any] | None = None,
        asynchronous: bool = True,
    ) -> None:
        """Write the checkpoint of ``step``: ``tensors`` (``{"model": ..., "optimizer": ...}``, this
        rank's shards or whole tensors) by every rank of ``dist`` (a collective), ``data``, ``rng`` (one
        state per rank) and ``extra`` by rank 0. ``asynchronous``: return once the tensors are staged in
        host memory; the checkpoint becomes complete when the background write ends (:meth:`wait`)."""
        import torch.distributed.checkpoint as dcp

        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        try:
            data_json = json.loads(json.dumps(dict(data or {})))
            extra_json = json.loads(json.dumps(dict(extra or {})))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"data_state and extra must be JSON-serialisable: {exc}") from exc
        self.wait()
        group = self.process_group(dist)
        tmp = self.root / f".tmp-{self.path_for(step).name}"
        if dist.rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            self._remove_leftovers()
            tmp.mkdir()
        dist.barrier()
        model, aliases = split_aliases(tensors.get("model", {}))
        tensors = {**tensors, "model": model}
        manifest = {"format": FORMAT_VERSION, "step": step, "world_size": dist.world_size,
                    "aliases": aliases, "data": data_json, "extra": extra_json}  # fmt: skip
        ranks = [dict(r) for r in rng] if rng is not None else None
        writer, errors = recording_writer(tmp / TENSORS_DIR)
        single = dist.world_size == 1
        try:
            quiet_single_process()
            if not asynchronous:
                dcp.save(tensors, storage_writer=writer, process_group=group, no_dist=single)
                self._finish(step, tmp, dist, group, manifest, ranks, errors)
                return
            staged = dcp.async_save(tensors, storage_writer=writer, process_group=group, no_dist=single)
        except BaseException as exc:
            raise self._failed(step, tmp, dist.rank, exc, errors) from exc
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="videorl-checkpoint")
        written = staged if isinstance(staged, Future) else staged.upload_completion
        self._pending = self._writer.submit(
            self._finish, step, tmp, dist, group, manifest, ranks, errors, written
        )

    def wait(self) -> None:
        """Wait for the write in flight (if any) to finish; raise what it failed with."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def process_group(self, dist: Parallel) -> Any:
        """The gloo group of this manager's collectives in a multi-process run, made at first use (a
        collective; None: one process). A background write's collectives must not mix with the
        training loop's, and a load's (plans, metadata: CPU objects) need no accelerator."""
        if dist.world_size == 1:
            return None
        if self._group is None:
            import torch.distributed as tdist

            from videorl.parallel import COLLECTIVE_TIMEOUT

            self._group = tdist.new_group(backend="gloo", timeout=COLLECTIVE_TIMEOUT)
        return self._group

    def _finish(
        self,
        step: int,
        tmp: Path,
        dist: Parallel,
        group: Any,
        manifest: dict[str, Any],
        rng: list[dict[str, Any]] | None,
        errors: list[OSError],
        written: Future[Any] | None = None,
    ) -> Path:
        """Once every rank's tensors are written (``written``: the background write, waited for here),
        each rank checksums its own files, and rank 0 writes the RNG states and ``state.json`` and
        renames the directory into place (then prunes)."""
        final = self.path_for(step)
        try:
            if written is not None:
                written.result()
            failure: BaseException | None = None
            try:
                own = {name: [size, crc] for name, size, crc in self._own_files(tmp, dist.rank)}
            except Exception as exc:  # gathered all the same: the other ranks would wait in the gather
                own, failure = {}, exc
            mine = (own, None if failure is None else f"{type(failure).__name__}: {failure}")
            gathered = [mine] if group is None else _gather(mine, dist.world_size, group)
            failed = [(rank, reason) for rank, (_, reason) in enumerate(gathered) if reason is not None]
            if failed:
                raise CheckpointError(
                    f"the checkpoint of step {step} was not completed: "
                    + "; ".join(
                        f"rank {rank} could not flush and checksum its files: {r}" for rank, r in failed
                    )
                ) from failure
            records = [files for files, _ in gathered]
            error = None
            if dist.rank == 0:
                try:
                    self._commit(final, tmp, manifest, records, rng)
                except BaseException as exc:
                    error = exc
            if group is not None:  # every rank learns whether the checkpoint is there
                import torch.distributed as tdist

                status = [None if error is None else f"{type(error).__name__}: {error}"]
                tdist.broadcast_object_list(status, src=0, group=group)
                if status[0] is not None and error is None:
                    raise CheckpointError(
                        f"rank 0 could not complete the checkpoint of step {step}: {status[0]}"
                    )
            if error is not None:
                raise error
        except BaseException as exc:
            raise self._failed(step, tmp, dist.rank, exc, errors) from exc
        return final

    @staticmethod
    def _own_files(tmp: Path, rank: int) -> list[tuple[str, int, str]]:
        """The files ``rank`` wrote into the checkpoint being written, fsynced, with sizes and CRCs (an
        ``OSError`` names the file: ``fsync``'s own names none)."""
        out = []
        tensors = tmp / TENSORS_DIR
        path = tensors
        try:
            for path in sorted(tensors.iterdir()):
                shard = SHARD.match(path.name)
                if (shard is not None and int(shard.group(1)) == rank) or (rank == 0 and shard is None):
                    fsync_file(path)
                    out.append((f"{TENSORS_DIR}/{path.name}", path.stat().st_size, file_crc32(path)))
            path = tensors
            fsync_dir(tensors)
        except OSError as exc:
            raise OSError(exc.errno, f"{path}: {exc.strerror or exc}") from exc
        return out

    def _commit(
        self,
        final: Path,
        tmp: Path,
        manifest: dict[str, Any],
        records: list[dict[str, list[Any]]],
        rng: list[dict[str, Any]] | None,
    ) -> None:
        """Rank 0 completes the checkpoint: ``rng.json``, then ``state.json`` with every rank's files
        (``records``: ``{name: [size, crc]}`` per rank), the rename into place, ``latest``, pruning."""
        if rng is not None:
            self._write_json(tmp / RNG_FILE, {"ranks": rng})
            records[0][RNG_FILE] = [(tmp / RNG_FILE).stat().st_size, file_crc32(tmp / RNG_FILE)]
        files = {name: record for own in records for name, record in own.items()}
        manifest = {
            **manifest,
            "files": {name: files[name][0] for name in sorted(files)},
            "checksums": {name: files[name][1] for name in sorted(files)},
            "writers": {
                name: r for r, own in enumerate(records) for name in own if SHARD.match(Path(name).name)
            },
        }
        self._write_json(tmp / STATE_FILE, manifest)
        fsync_dir(tmp)
        if final.exists():  # the same step written again (after resuming from an earlier one)
            self._delete(final)
        os.rename(tmp, final)
        fsync_dir(self.root)
        self._write_pointer(final.name)
        self.prune()

    def _failed(
        self, step: int, tmp: Path, rank: int, exc: BaseException, errors: Sequence[OSError]
    ) -> BaseException:
        """Remove what a failed write left (rank 0) and say what happened (a full disk, by name, also
        when ``torch.save`` replaced the write's ``OSError`` with its own "unexpected pos")."""
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        full = is_disk_full(exc) or any(is_disk_full(error) for error in errors)
        if not isinstance(exc, (DiskFullError, KeyboardInterrupt, SystemExit)) and full:
            kept = self.latest()
            return disk_full(
                self.root,
                f"the checkpoint of step {step} was not written (nothing of it is left); "
                + (
                    f"the last complete checkpoint, {kept.name}, is kept"
                    if kept
                    else "no earlier checkpoint exists"
                ),
            )
        return exc

    @staticmethod
    def _write_json(path: Path, value: Any) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(value, f)
            f.flush()
            os.fsync(f.fileno())

    def _write_pointer(self, name: str) -> None:
        atomic_write_text(self.root / LATEST_FILE, name + "\n")

    def _delete(self, path: Path) -> None:
        """Remove a checkpoint so that a kill half-way never leaves a directory that looks complete."""
        trash = self.root / f".trash-{path.name}-{uuid.uuid4().hex[:8]}"
        os.rename(path, trash)
        fsync_dir(self.root)
        shutil.rmtree(trash, ignore_errors=True)

    def _remove_leftovers(self) -> None:
        """Temporary and trash directories of writers that were killed."""
        for pattern in (".tmp-*", ".trash-*"):
            for path in self.root.glob(pattern):
                shutil.rmtree(path, ignore_errors=True)

    def _skip(self, path: Path, reason: str) -> None:
        """Log once that checkpoint ``path`` is passed over, and why."""
        if reason not in self._reported:
            self._reported.add(reason)
            log.warning("skipping checkpoint %s: %s", path.name, reason)

    def complete(self) -> list[Path]:
        """The complete checkpoints (every file there with its recorded size), oldest first; incomplete
        ones are skipped with a log line, foreign directories silently."""
        if not self.root.is_dir():
            return []
        found = []
        for path in self.root.iterdir():
            if not path.is_dir() or not STEP_DIR.match(path.name):
                continue
            try:
                manifest = read_manifest(path)
            except CheckpointError as exc:
                self._skip(path, str(exc))
                continue
            found.append((manifest["step"], path))
        return [path for _, path in sorted(found)]

    def latest(self) -> Path | None:
        """The complete checkpoint with the highest step, or ``None`` (sizes checked, not contents)."""
        complete = self.complete()
        return complete[-1] if complete else None

    def latest_valid(self, at_most: int | None = None) -> Path | None:
        """The newest checkpoint (of a step up to ``at_most``, when given) whose contents match their
        checksums; a newer damaged one is passed over with a warning naming it (resume and export fall
        back to the previous complete checkpoint)."""
        for path in reversed(self.complete()):
            if at_most is not None and step_of(path) > at_most:
                continue
            try:
                self.verify(path)
            except CheckpointError as exc:
                self._skip(path, f"{exc}; falling back to the previous complete checkpoint")
                continue
            return path
        return None

    def verify(self, path: str | Path) -> dict[str, Any]:
        """The manifest of checkpoint ``path`` after checking sizes and contents (:class:`CheckpointError`
        naming the damaged file otherwise); each checkpoint is read once per manager. In a process group
        a rank checks the files it reads (its shards and the shared files), outside one every file."""
        path = Path(path)
        manifest = read_manifest(path)
        if path not in self._verified:
            check_contents(path, manifest, _process_rank())
            self._verified.add(path)
        return manifest

    def prune(self) -> None:
        """Keep the newest ``keep_last`` complete checkpoints (all when 0)."""
        if self.keep_last <= 0:
            return
        for path in self.complete()[: -self.keep_last]:
            self._delete(path)

    def resolve_resume(self, spec: str | None) -> Path | None:
        """The checkpoint to resume from: ``None``/``"none"``: none; ``"auto"``: the latest complete one
        (``None`` when there is none yet); otherwise a checkpoint directory, which must be complete."""
        if spec is None or spec.strip().lower() in ("", "none", "null", "never"):
            return None
        if spec.strip().lower() == "auto":
            return self.latest_valid()
        path = Path(spec)
        self.verify(path)
        return path

    def load(self, path: str | Path) -> Checkpoint:
        """A complete, undamaged checkpoint (raises :class:`CheckpointError` naming what is wrong
        otherwise)."""
        path = Path(path)
        manifest = self.verify(path)
        return Checkpoint(
            path,
            manifest["step"],
            manifest.get("data", {}),
            manifest.get("extra", {}),
            format=manifest["format"],
            aliases=manifest.get("aliases", {}),
            files=checked_files(manifest),
        )


def _gather(value: Any, world_size: int, group: Any) -> list[Any]:
    """``value`` of every rank of ``group`` (object collective on its gloo backend)."""
    import torch.distributed as tdist

    out: list[Any] = [None] * world_size
    tdist.all_gather_object(out, value, group=group)
    return out
