"""``videorl cache build`` killed while a worker is busy (SIGTERM or SIGKILL): no worker outlives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

psutil = pytest.importorskip("psutil")


def _busy_descendants(proc: subprocess.Popen[bytes], deadline: float) -> list[Any]:
    """The build's processes (forkserver and workers) once a worker has spent CPU on its input."""
    me = psutil.Process(proc.pid)
    while time.monotonic() < deadline:
        found = me.children(recursive=True)
        if any(p.cpu_times().user + p.cpu_times().system > 0.5 for p in found if p.is_running()):
            return found
        time.sleep(0.2)
    raise AssertionError("no worker got busy")


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_killing_cache_build_leaves_no_worker(tmp_path: Path, signum: int) -> None:
    video = tmp_path / "huge.mp4"
    with open(video, "wb") as f:
        f.truncate(1 << 40)  # 1 TiB, sparse: hashing it keeps a worker busy for many minutes
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"problem": "", "videos": [str(video)]}) + "\n")
    args = ["--cache-dir", str(tmp_path / "cache"), "--factor", "28", "--workers", "1", "--quiet"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "videorl.cli", "cache", "build", str(data), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    try:
        workers = _busy_descendants(proc, time.monotonic() + 60)
        proc.send_signal(signum)
        assert proc.wait(timeout=30) == (-signum if signum == signal.SIGKILL else 128 + signum)
        _, alive = psutil.wait_procs(workers, timeout=15)
        assert alive == [], f"left running: {[(p.pid, p.name()) for p in alive]}"
    finally:
        proc.kill()
        for p in psutil.Process().children(recursive=True):
            p.kill()
