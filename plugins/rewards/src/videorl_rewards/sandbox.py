"""Run untrusted Python (the code reward's programs) where the kernel, not the program, sets the limits.

Isolated (the default): the program runs under bubblewrap (``bwrap``) in new user, mount, PID, IPC, UTS,
cgroup and network namespaces, as an unprivileged user (``nobody`` on the host when the scorer runs as
root) with no capabilities and no way to create further user namespaces, under a seccomp filter
(:mod:`videorl_rewards._seccomp`) where one exists for the CPU. It sees read-only ``/usr``, the Python
installation and ``/dev`` (five harmless devices), and one writable place: a private tmpfs ``/tmp`` of
``disk_mb`` (its working directory, and ``/dev/shm`` links there), which vanishes with it; nothing of the
host's ``/tmp``, home, run directory, processes, network or shared memory. rlimits on CPU time, address
space, open files and file size are set before bubblewrap starts, so every process of the sandbox has
them; the process limit is set by the harness, the namespace's init (bwrap's ``--as-pid-1``: there is
no reaper of bwrap's), before it forks the program (see ``_sandbox_harness``). stderr is a pipe of which
the scorer keeps the last ``STDERR_KEPT`` bytes. The whole PID namespace is killed at the wall-clock
limit, or as soon as the results are in.

Unisolated (only with the caller's explicit opt-in, where bubblewrap or user namespaces are missing):
rlimits, a session of its own and an audit hook (see ``_sandbox_harness``) that a program can defeat.
The threat model and what each level protects are in docs/security.md.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
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

from videorl_rewards import _seccomp

_HARNESS = Path(__file__).with_name("_sandbox_harness.py")
_READY = b'{"ready": true}\n'
_DONE = b'{"done": true}\n'
#: seconds the sandboxed interpreter may take to start before the program's own time limit begins
STARTUP_SECONDS = 30.0
#: the host user the sandbox runs as when the scorer is root (the kernel then enforces RLIMIT_NPROC)
SANDBOX_UID = 65534
#: the sandbox's working directory, inside its private /tmp
WORKDIR = "/tmp/videorl-code"
#: where ``/dev/shm`` points: POSIX shared memory lives in the sandbox's one size-capped tmpfs
SHM_DIR = "/tmp/shm"
#: the devices of the sandbox's read-only ``/dev`` (no ttys: ptys are a host-wide resource)
DEVICES = ("null", "zero", "full", "random", "urandom")
#: bytes of stderr (the sandbox's start-up errors) the scorer keeps, the last ones
STDERR_KEPT = 4096
#: open files per process in the sandbox
OPEN_FILES = 256
_INSIDE_HARNESS = "/.videorl/harness.py"


class SandboxUnavailable(RuntimeError):
    """The sandbox did not start, which is not the program's fault: no bubblewrap, no user namespaces,
    or limits too tight for Python to start (the message says which)."""


@dataclass(frozen=True)
class Limits:
    """What one run may use: wall-clock seconds, memory (address space per process), characters of
    output per test, MiB of private disk (tmpfs), processes and threads."""

    seconds: float = 5.0
    memory_mb: int = 512
    output_chars: int = 1_000_000
    disk_mb: int = 64
    processes: int = 32


@dataclass
class RunResult:
    """One JSON report per test that finished, and why the run stopped early (if it did)."""

    reports: dict[int, dict[str, Any]] = field(default_factory=dict)
    timed_out: bool = False
    over_output: bool = False


@dataclass(frozen=True)
class Isolation:
    """What this machine offers: ``level`` ``"namespaces+seccomp"``, ``"namespaces"`` or ``"none"``
    (then ``reason`` says why)."""

    level: str
    reason: str = ""

    @property
    def available(self) -> bool:
        return self.level != "none"


def _bind_root_dirs() -> list[str]:
    """``/bin``, ``/lib``… as on the host: links on a merged-/usr system, read-only binds otherwise."""
    args: list[str] = []
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    return args


def _interpreter() -> str:
    """The real interpreter of the Python installation (a virtual environment's ``python`` may be a
    copy, outside the installation that the sandbox shows)."""
    prefix = os.path.realpath(sys.base_prefix)
    for candidate in (sys.executable, getattr(sys, "_base_executable", sys.executable)):
        real = os.path.realpath(candidate)
        if real.startswith(prefix + os.sep):
            return real
    return os.path.realpath(sys.executable)


def _dev_args() -> list[str]:
    """A read-only ``/dev``: the ``DEVICES`` of the host, the usual links, ``/dev/shm`` -> ``SHM_DIR``."""
    args = ["--size", "65536", "--perms", "0755", "--tmpfs", "/dev"]
    for name in DEVICES:
        args += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        args += ["--symlink", f"/proc/self/fd/{fd}", f"/dev/{name}"]
    args += ["--symlink", "/proc/self/fd", "/dev/fd", "--symlink", SHM_DIR, "/dev/shm"]
    return [*args, "--remount-ro", "/dev"]


def _bwrap_args(bwrap: str, limits: Limits, fds: dict[str, int]) -> list[str]:
    prefix = os.path.realpath(sys.base_prefix)
    env = {"PATH": "/usr/bin:/bin", "HOME": WORKDIR, "TMPDIR": WORKDIR, "LANG": "C.UTF-8"}
    args = [
        bwrap,
        *("--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"),
        *("--unshare-cgroup-try", "--disable-userns", "--die-with-parent", "--new-session", "--as-pid-1"),
        *("--cap-drop", "ALL", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)),
        *("--hostname", "sandbox", "--clearenv"),
        *(a for k, v in env.items() for a in ("--setenv", k, v)),
        *("--ro-bind", "/usr", "/usr"),
        *_bind_root_dirs(),
    ]
    if prefix != "/usr" and not prefix.startswith("/usr/"):
        args += ["--ro-bind", prefix, prefix]
    args += [
        *("--ro-bind-data", str(fds["harness"]), _INSIDE_HARNESS),
        *("--proc", "/proc", *_dev_args()),
        *("--size", str(limits.disk_mb * 2**20), "--perms", "1777", "--tmpfs", "/tmp"),
        *("--perms", "1777", "--dir", SHM_DIR),
        *("--dir", WORKDIR, "--chdir", WORKDIR, "--remount-ro", "/"),
        *("--info-fd", str(fds["info"])),
    ]
    if "seccomp" in fds:
        args += ["--seccomp", str(fds["seccomp"])]
    if os.geteuid() == 0:
        args = _drop_root(prefix) + args
    return args


def _rlimit_args(limits: Limits) -> list[str]:
    """``prlimit`` and the limits the run's first process (and so every later one) starts under, each
    only ever lowered. Not the process limit: before the sandbox's user namespace exists it would count
    every process of the host user (see ``_sandbox_harness``)."""
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        raise SandboxUnavailable("prlimit (util-linux) is not installed")
    wanted = {
        "cpu": (resource.RLIMIT_CPU, int(limits.seconds) + 1),
        "as": (resource.RLIMIT_AS, limits.memory_mb * 2**20),
        "fsize": (resource.RLIMIT_FSIZE, max(limits.output_chars, 2**20)),
        "nofile": (resource.RLIMIT_NOFILE, OPEN_FILES),
        "core": (resource.RLIMIT_CORE, 0),
    }
    args = [prlimit]
    for name, (kind, value) in wanted.items():
        hard = resource.getrlimit(kind)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        args.append(f"--{name}={value}:{value}")
    return [*args, "--"]


# Run by unshare(1) in a mount namespace of its own: a tmpfs over $2 (the private directory above the
# Python installation $1), the installation bound read-only at its own path again (through the working
# directory, which still is the original), then exec the rest of the arguments.
_SHOW_PYTHON = (
    'umask 022 && cd "$1" && mount -t tmpfs -o mode=0755 videorl "$2" && mkdir -p "$1" && '
    'mount -c --bind /proc/self/cwd "$1" && mount -c -o remount,bind,ro "$1" && cd / && shift 2 && exec "$@"'
)


def _drop_root(prefix: str) -> list[str]:
    """What runs the sandbox's bwrap as ``SANDBOX_UID`` when the scorer is root: the kernel applies
    neither RLIMIT_NPROC nor file permissions to root. Every step execs the next, so bwrap stays the
    scorer's child and dies with it (``--pdeathsig``: a change of user clears bwrap's own). An
    unprivileged bwrap cannot reach a Python installed under a private directory (pyenv in ``/root``):
    there, a root mount namespace first shows the installation alone (``_SHOW_PYTHON``)."""
    uid = str(SANDBOX_UID)
    drop = [shutil.which("setpriv") or "setpriv", "--reuid", uid, "--regid", uid, "--clear-groups"]
    drop += ["--pdeathsig", "KILL", "--"]
    parts = Path(prefix).parts
    private = next(
        (
            str(Path(*parts[:i]))
            for i in range(2, len(parts))
            if not os.stat(Path(*parts[:i])).st_mode & 0o001
        ),
        None,
    )
    if private is None:
        return drop
    unshare = shutil.which("unshare") or "unshare"
    show = [unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", _SHOW_PYTHON, "sh"]
    return [*show, prefix, private, *drop]


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def run_python(code: str, tests: list[str], *, mode: str, limits: Limits, isolated: bool = True) -> RunResult:
    """Run ``code`` against ``tests`` (``mode`` ``"assert"`` or ``"io"``, see ``_sandbox_harness``),
    isolated by default (see the module docstring; ``isolated=False`` is the audit-hook fallback).

    A sandbox that fails before it runs the code (not the code's fault) raises ``SandboxUnavailable``."""
    config = {
        "code": code,
        "tests": tests,
        "mode": mode,
        "audit_hook": not isolated,
        "init": isolated,
        "limits": {"output_chars": limits.output_chars, "processes": limits.processes if isolated else None},
    }
    fds: dict[str, int] = {}
    try:
        fds["stdin"] = _memfd("videorl-code-config", json.dumps(config).encode())
        fds["result_r"], fds["result_w"] = os.pipe()
        fds["stderr_r"], fds["stderr_w"] = os.pipe()
        with contextlib.ExitStack() as stack:
            popen: dict[str, Any] = {}
            if isolated:
                bwrap = shutil.which("bwrap")
                if bwrap is None:
                    raise SandboxUnavailable("bubblewrap (bwrap) is not installed")
                fds["info_r"], fds["info"] = os.pipe()
                fds["harness"] = _memfd("videorl-harness", _HARNESS.read_bytes())
                program = _seccomp.program()
                if program is not None:
                    fds["seccomp"] = _memfd("videorl-seccomp", program)
                argv = [*_bwrap_args(bwrap, limits, fds), "--", _interpreter()]
                argv += ["-I", "-S", "-B", _INSIDE_HARNESS, str(fds["result_w"])]
                popen.update(env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, cwd="/")
            else:
                workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="videorl-code-"))
                argv = [sys.executable, "-I", "-B", str(_HARNESS), str(fds["result_w"])]
                env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
                popen.update(env=env, cwd=workdir)
            passed = [fds[k] for k in ("result_w", "info", "harness", "seccomp") if k in fds]
            proc = subprocess.Popen(
                [*_rlimit_args(limits), *argv],
                stdin=fds["stdin"],
                stdout=subprocess.DEVNULL,
                stderr=fds["stderr_w"],
                pass_fds=passed,
                start_new_session=True,
                **popen,
            )
            for name in ("result_w", "stderr_w", "info"):  # the child's copies must be the only ones left
                if name in fds:
                    os.close(fds.pop(name))
            result, started, returncode, stderr = _collect(proc, fds, limits, code_tests=len(tests))
            if not started:
                message = stderr.decode("utf-8", "replace").strip()  # the last bytes: a traceback's cause
                raise SandboxUnavailable(
                    f"the code sandbox did not start (exit code {returncode})"
                    + (f": {message}" if message else "")
                )
    finally:
        for fd in fds.values():
            os.close(fd)
    return result


def _collect(
    proc: subprocess.Popen[bytes], fds: dict[str, int], limits: Limits, *, code_tests: int
) -> tuple[RunResult, bool, int, bytes]:
    """Read the reports until the harness says it is done, the output cap or the deadline, then kill
    everything the run started (the whole PID namespace when isolated). Also the run's exit code and
    the last ``STDERR_KEPT`` bytes of its stderr."""
    result = RunResult()
    cap = (limits.output_chars + 1000) * max(1, code_tests) + 65536
    # the time limit runs from the moment the harness is ready, so a slow interpreter start on a busy
    # machine does not eat the program's time
    deadline = time.monotonic() + STARTUP_SECONDS + limits.seconds
    started = False
    data, info, stderr = bytearray(), bytearray(), b""
    pidfd: int | None = None
    watched = [fds[k] for k in ("result_r", "stderr_r", "info_r") if k in fds]
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                result.timed_out = True
                break
            readable, _, _ = select.select(watched, [], [], remaining)
            for fd in set(readable) - {fds["result_r"]}:
                chunk = os.read(fd, 65536)
                if fd == fds["stderr_r"]:
                    stderr = (stderr + chunk)[-STDERR_KEPT:]
                else:
                    info += chunk
                    pidfd = pidfd if pidfd is not None else _namespace_pidfd(info)
                if not chunk or (fd != fds["stderr_r"] and len(info) > 4096):
                    watched.remove(fd)
            if fds["result_r"] not in readable:
                continue
            chunk = os.read(fds["result_r"], 65536)
            if not chunk:
                break
            data += chunk
            if not started and _READY in data:
                started = True
                deadline = time.monotonic() + limits.seconds
            if len(data) > cap:
                result.over_output = True
                break
            if _DONE in data[-len(chunk) - len(_DONE) :]:
                break
    finally:
        returncode = _kill(proc, pidfd)
    if not started:  # what the run wrote to stderr before it ended (its writers are gone now)
        while select.select([fds["stderr_r"]], [], [], 0)[0] and (chunk := os.read(fds["stderr_r"], 65536)):
            stderr = (stderr + chunk)[-STDERR_KEPT:]
    for line in bytes(data).decode("utf-8", "replace").splitlines():
        with contextlib.suppress(ValueError):
            report = json.loads(line)
            if isinstance(report, dict) and isinstance(report.get("test"), int):
                result.reports.setdefault(report["test"], report)
    return result, started, returncode, stderr


def _namespace_pidfd(info: bytearray) -> int | None:
    """A pidfd of the PID namespace's init (bwrap's ``child-pid``), once its info has arrived."""
    with contextlib.suppress(ValueError, OSError, TypeError):
        pid = json.loads(bytes(info).split(b"}", 1)[0] + b"}")["child-pid"]
        return os.pidfd_open(int(pid))
    return None


def _kill(proc: subprocess.Popen[bytes], pidfd: int | None) -> int:
    """Kill the run and wait until nothing of it is left; the child's exit code."""
    if pidfd is not None:
        # killing the namespace's init makes the kernel kill every process in it; bwrap (our child)
        # exits only after it has reaped that init, so once it is waited for, the namespace is empty
        with contextlib.suppress(ProcessLookupError, OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        os.close(pidfd)
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait()


@functools.lru_cache(maxsize=1)
def isolation() -> Isolation:
    """Probe (once per process) whether the isolated sandbox runs here, and at which level."""
    try:
        run = run_python("", ["assert True"], mode="assert", limits=Limits(seconds=10.0))
    except (SandboxUnavailable, OSError) as exc:
        return Isolation("none", str(exc))
    if run.reports.get(0, {}).get("ok") is not True:
        return Isolation("none", "the isolated sandbox started but did not run a trivial test")
    return Isolation("namespaces+seccomp" if _seccomp.program() is not None else "namespaces")
