"""One writer per run directory and evaluation folder: a second process is refused naming the holder,
a lock its dead holder left is taken over."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from videorl.eval.results import RESULTS_FILE, begin_run, read_results
from videorl.runs.lock import LOCK_FILE, FolderLock


def _other_process(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env
    )


def test_a_second_process_is_refused_naming_the_holder_s_pid(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with FolderLock.acquire(run, "the output_dir"):
        done = _other_process(
            f"""
            from videorl.runs.lock import FolderLock, LockedError
            try:
                FolderLock.acquire({str(run)!r}, "the output_dir")
            except LockedError as exc:
                print(exc)
            """
        )
        assert f"is the output_dir of another running process (pid {os.getpid()} on " in done.stdout
    assert not run.exists()  # made for the lock, left empty: removed with it


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (run / LOCK_FILE).write_text(json.dumps({"pid": int(dead.stdout), "host": "h", "started": 0}))
    with FolderLock.acquire(run):
        assert json.loads((run / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert not (run / LOCK_FILE).exists() and run.is_dir()


def test_one_process_may_take_its_own_lock_again(tmp_path: Path) -> None:
    outer = FolderLock.acquire(tmp_path)
    inner = FolderLock.acquire(tmp_path)
    inner.release()
    assert (tmp_path / LOCK_FILE).exists()  # still held by the outer one
    outer.release()
    outer.release()  # once
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_second_evaluation_into_one_folder_is_refused_and_loses_nothing(tmp_path: Path) -> None:
    run = tmp_path / "eval"
    begin_run(run, {"model": {"path": "m"}})
    with FolderLock.acquire(run, "the evaluation folder (--out)"):
        done = _other_process(
            f"""
            from videorl.eval.results import begin_run
            begin_run({str(run)!r}, {{"model": {{"path": "m"}}, "benchmarks": {{"b": {{}}}}}})
            """
        )
        assert done.returncode != 0
        assert (
            f"LockedError: {run} is the evaluation folder of another running process (pid {os.getpid()}"
            in (done.stderr)
        )
    assert read_results(run)["settings"] == {"model": {"path": "m"}}
    assert (run / RESULTS_FILE).is_file()
