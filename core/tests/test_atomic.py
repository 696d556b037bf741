"""``videorl.atomic``: a killed writer leaves the old file whole, temporary names are unique and hidden,
the file is fsynced before the rename and the directory after it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from videorl import atomic
from videorl.atomic import atomic_write, atomic_write_bytes, atomic_write_text, is_temp, temp_path

_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from videorl.atomic import atomic_write, atomic_write_text

    mode, target = sys.argv[1], Path(sys.argv[2])

    def stall():
        print("READY", flush=True)
        time.sleep(60)

    if mode == "callback":  # killed after the callback filled the temporary file, before the rename
        def write(tmp):
            tmp.write_text("new content", encoding="utf-8")
            stall()
        atomic_write(target, write)
    else:  # killed after the temporary file was written and fsynced, at the rename
        real_replace = os.replace
        def stalled_replace(src, dst):
            stall()
            real_replace(src, dst)
        os.replace = stalled_replace
        atomic_write_text(target, "new content")
    print("DONE", flush=True)
    """
)


@pytest.mark.parametrize("mode", ["callback", "before-rename"])
def test_a_killed_writer_leaves_the_old_file_intact(tmp_path: Path, mode: str) -> None:
    target = tmp_path / "state.json"
    target.write_text("old content", encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, mode, str(target)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY", "the writer did not reach the write"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert target.read_text(encoding="utf-8") == "old content"
    leftovers = [p for p in tmp_path.iterdir() if p != target]
    assert len(leftovers) == 1 and is_temp(leftovers[0])  # the killed writer's temporary file, recognisable
    assert leftovers[0].read_text(encoding="utf-8") == "new content"
    atomic_write_text(target, "next")  # the next writer is not disturbed by it
    assert target.read_text(encoding="utf-8") == "next"


def test_text_bytes_and_callback_replace_the_target_and_leave_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    atomic_write_text(target, "héllo\n")
    assert target.read_bytes() == "héllo\n".encode()
    atomic_write_bytes(target, b"\x00\xff")
    assert target.read_bytes() == b"\x00\xff"
    atomic_write(str(target), lambda tmp: tmp.write_bytes(b"from a callback"))
    assert target.read_bytes() == b"from a callback"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_the_target_directory_is_created(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "out.json"
    atomic_write_text(target, "{}")
    assert target.read_text() == "{}"


def test_a_failing_callback_keeps_the_old_file_and_removes_its_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old")

    def write(tmp: Path) -> None:
        tmp.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(target, write)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_temporary_names_are_unique_hidden_and_beside_the_target(tmp_path: Path) -> None:
    target = tmp_path / "entry.safetensors"
    names = {temp_path(target) for _ in range(100)}
    assert len(names) == 100
    for name in names:
        assert name.parent == tmp_path and name.name.startswith(".entry.safetensors.tmp-")
        assert name.suffix == ".tmp" and is_temp(name)
    assert not is_temp(target) and not is_temp(tmp_path / ".hidden") and not is_temp(tmp_path / "x.tmp-1")
    assert not list(tmp_path.glob("*.safetensors"))  # a temporary file never matches the target's suffix


def test_the_file_is_fsynced_before_the_rename_and_the_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: str | Path, dst: str | Path) -> None:
        events.append(("replace", str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    monkeypatch.setattr(atomic.os, "replace", replace)
    target = tmp_path / "out.txt"
    atomic_write_text(target, "x")
    assert [kind for kind, _ in events] == ["fsync", "replace", "fsync"]
    assert is_temp(events[0][1]) and Path(events[0][1]).parent == tmp_path
    assert events[1][1] == str(target) and events[2][1] == str(tmp_path)
