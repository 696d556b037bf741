"""Run untrusted Python in a subprocess with time, memory and output limits, no network, and no writes
outside a temporary directory.

Layers: a fresh process group killed at the wall-clock limit; rlimits on CPU time, address space, file
size and core dumps; an audit hook in the child (see ``_sandbox_harness``) that refuses new processes,
signals, sockets, native-code loading and writes outside the temporary working directory; and, where
``unshare --net`` works, a network namespace without interfaces. The environment is emptied and the
interpreter runs isolated (``-I -B``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_HARNESS = Path(__file__).with_name("_sandbox_harness.py")
_READY = b'{"ready": true}\n'
#: seconds the sandboxed interpreter may take to start before the program's own time limit begins
STARTUP_SECONDS = 30.0


@dataclass(frozen=True)
class Limits:
    """What one run may use: wall-clock seconds, memory, characters of output per test."""

    seconds: float = 5.0
    memory_mb: int = 512
    output_chars: int = 1_000_000


@dataclass
class RunResult:
    """One JSON report per test that finished, and why the run stopped early (if it did)."""

    reports: dict[int, dict[str, Any]] = field(default_factory=dict)
    timed_out: bool = False
    over_output: bool = False


@functools.lru_cache(maxsize=1)
def network_isolation() -> tuple[str, ...]:
    """The command prefix that gives a process its own, empty network namespace (``()`` if none works
    here; the audit hook still refuses sockets)."""
    tool = shutil.which("unshare")
    if tool is None:
        return ()
    for prefix in ((tool, "--net"), (tool, "--map-root-user", "--net")):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0:
                return prefix
    return ()


def run_python(code: str, tests: list[str], *, mode: str, limits: Limits) -> RunResult:
    """Run ``code`` against ``tests`` (``mode`` ``"assert"`` or ``"io"``, see ``_sandbox_harness``).

    A sandbox that fails before it runs the code (not the code's fault) raises ``RuntimeError``."""
    config = {
        "code": code,
        "tests": tests,
        "mode": mode,
        "limits": {
            "cpu_seconds": int(limits.seconds) + 1,
            "memory_bytes": limits.memory_mb * 2**20,
            "file_bytes": max(limits.output_chars, 2**20),
            "output_chars": limits.output_chars,
        },
    }
    result = RunResult()
    cap = (limits.output_chars + 1000) * max(1, len(tests)) + 65536
    with tempfile.TemporaryDirectory(prefix="videorl-code-") as tmp:
        config_path = Path(tmp, "config.json")
        config_path.write_text(json.dumps(config), encoding="utf-8")
        read_fd, write_fd = os.pipe()
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8"}
        try:
            proc = subprocess.Popen(
                [
                    *network_isolation(),
                    sys.executable,
                    "-I",
                    "-B",
                    str(_HARNESS),
                    str(config_path),
                    str(write_fd),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(write_fd,),
                cwd=tmp,
                env=env,
                start_new_session=True,
            )
        finally:
            os.close(write_fd)
        # the time limit runs from the moment the harness is ready, so a slow interpreter start on a
        # busy machine does not eat the program's time
        deadline = time.monotonic() + STARTUP_SECONDS + limits.seconds
        started = False
        data = bytearray()
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    result.timed_out = True
                    break
                readable, _, _ = select.select([read_fd], [], [], remaining)
                if not readable:
                    continue
                chunk = os.read(read_fd, 65536)
                if not chunk:
                    break
                data += chunk
                if not started and _READY in data:
                    started = True
                    deadline = time.monotonic() + limits.seconds
                if len(data) > cap:
                    result.over_output = True
                    break
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            os.close(read_fd)
    if not started:
        raise RuntimeError(
            f"the code sandbox did not start (exit code {proc.returncode}); check that {sys.executable} "
            f"runs and that {' '.join(network_isolation()) or 'the interpreter'} is allowed here"
        )
    for line in bytes(data).decode("utf-8", "replace").splitlines():
        with contextlib.suppress(ValueError):
            report = json.loads(line)
            if isinstance(report, dict) and isinstance(report.get("test"), int):
                result.reports.setdefault(report["test"], report)
    return result
