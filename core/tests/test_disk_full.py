"""A full disk: every writer says "disk full at <folder>", leaves nothing half-written and keeps what was
complete. On a real full file system (a small tmpfs, where the test may mount one) and, portably, with the
error that libraries raise injected where they raise it."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from videorl.atomic import DiskFullError, atomic_write, atomic_write_bytes, is_disk_full
from videorl.media import DecodeParams
from videorl.runs.checkpoint import CheckpointManager


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """``small_disk(kib)``: a folder on a tmpfs of that size (skipped where mounting is not allowed)."""
    mounted: list[Path] = []

    def mount(kib: int) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(where)],
            capture_output=True,
            check=False,
        )
        if result.returncode != 0:
            pytest.skip(
                f"cannot mount a small tmpfs here ({result.stderr.decode().strip()}); the injected tests "
                "cover it"
            )
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(folder: Path, leave: int = 0) -> None:
    """Fill the file system of ``folder`` up to ``leave`` bytes."""
    with open(folder / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    if leave:
        size = (folder / "filler").stat().st_size
        os.truncate(folder / "filler", max(0, size - leave))


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_is_disk_full_recognises_the_errors_libraries_raise() -> None:
    from safetensors import SafetensorError

    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert is_disk_full(
        SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    )
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as exc:
            raise RuntimeError(
                "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"
            ) from exc
    except RuntimeError as wrapped:
        assert is_disk_full(wrapped)
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))


def test_atomic_write_on_a_full_disk_keeps_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "report.jsonl"
    target.write_text("old\n")

    def write(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(
        DiskFullError, match=rf"disk full at {tmp_path} \(.* bytes free\): report.jsonl was not written"
    ):
        atomic_write(target, write)
    assert target.read_text() == "old\n" and _files(tmp_path) == ["report.jsonl"]


def test_atomic_write_on_a_real_full_disk(small_disk: Callable[[int], Path]) -> None:
    disk = small_disk(64)
    (disk / "kept.txt").write_text("complete")
    _fill(disk)
    with pytest.raises(DiskFullError, match=f"disk full at {disk}"):
        atomic_write_bytes(disk / "new.bin", b"x" * 200_000)
    assert _files(disk) == ["filler", "kept.txt"] and (disk / "kept.txt").read_text() == "complete"


def _state(n: int) -> dict[str, torch.Tensor]:
    return {"w": torch.arange(float(n))}


def test_a_checkpoint_on_a_real_full_disk_keeps_the_previous_one(small_disk: Callable[[int], Path]) -> None:
    disk = small_disk(1024)
    manager = CheckpointManager(disk / "checkpoints")
    first = manager.save(1, model_state=_state(1000), optimizer_state={"state": {"m": torch.zeros(1000)}})
    _fill(disk, leave=8192)  # room for the model file, not for the optimizer state: torch's "unexpected pos"
    with pytest.raises(DiskFullError) as info:
        manager.save(2, model_state=_state(1000), optimizer_state={"state": {"m": torch.zeros(100_000)}})
    message = str(info.value)
    assert message.startswith(f"disk full at {disk / 'checkpoints'}") and "step 2 was not written" in message
    assert "step_000001, is kept" in message and "unexpected pos" not in message
    assert [
        p.name for p in (disk / "checkpoints").iterdir() if p.name.startswith(".")
    ] == []  # no .tmp folder
    assert CheckpointManager(disk / "checkpoints").resolve_resume("auto") == first


def test_a_checkpoint_whose_model_file_hits_a_full_disk_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Portable: the disk fills after part of a shard was written (DCP wraps the error)."""
    import errno

    from torch.distributed.checkpoint import FileSystemWriter

    manager = CheckpointManager(tmp_path)
    first = manager.save(1, model_state=_state(10))

    def full(self: FileSystemWriter, *args: object, **kwargs: object) -> None:
        (Path(self.path) / "__0_0.distcp").write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(FileSystemWriter, "write_data", full)
    with pytest.raises(DiskFullError, match=f"disk full at {tmp_path}.*step 2 was not written"):
        manager.save(2, model_state=_state(10))
    assert _files(tmp_path) == sorted(
        ["latest", *[f"step_000001/{name}" for name in _files(first)], "step_000001"]
    )


def test_cache_build_on_a_real_full_disk_keeps_the_complete_entries(
    small_disk: Callable[[int], Path], make_clip: Callable[..., Path], run_cli: Callable[..., Any]
) -> None:
    from videorl.media import MediaCache

    disk = small_disk(512)
    small = make_clip("small.mp4", frames=8)  # 4 frames of 112×224: about 300 kB
    large = make_clip("large.mp4", frames=240)  # 16 frames: more than what is left
    result = run_cli("cache", "build", str(small), str(large), "--cache-dir", str(disk), "--factor", "28",
                     "--workers", "1", "--quiet")  # fmt: skip
    assert result.exit_code == 1 and result.exception is None, result.stderr
    assert "1 of 2 videos cached" in result.output  # the summary, although the disk is full
    [failure] = [json.loads(line) for line in (disk / "build-failures.jsonl").read_text().splitlines()]
    assert failure["video"] == str(large) and failure["stage"] == "decode"
    assert failure["reason"].startswith(f"disk full at {disk / 'entries'}")
    cache = MediaCache(disk)
    assert len(list(cache.entry_paths())) == 1 and cache.temp_files() == []
    cache.load_numpy(str(small), DecodeParams(factor=28, temporal_patch_size=2))  # the complete one is whole


def test_videorl_reward_on_a_real_full_disk(
    small_disk: Callable[[int], Path], tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    pytest.importorskip("videorl_rewards")
    rows = tmp_path / "rows.jsonl"
    row = {
        "problem_type": "multiple choice",
        "options": ["A. x", "B. y"],
        "answer": "A",
        "response": "<answer>A</answer>",
    }
    rows.write_text("".join(json.dumps({**row, "id": str(i), "pad": "x" * 1000}) + "\n" for i in range(200)))
    disk = small_disk(64)
    (disk / "scored.jsonl").write_text("previous\n")
    _fill(disk)
    result = run_cli("reward", "--input", str(rows), "--output", str(disk / "scored.jsonl"))
    assert result.exit_code != 0 and result.exception is None
    assert f"disk full at {disk}" in result.stderr and "Traceback" not in result.stderr
    assert (disk / "scored.jsonl").read_text() == "previous\n" and _files(disk) == ["filler", "scored.jsonl"]
