"""Runs untrusted Python for the code reward: ``python -I -B _sandbox_harness.py RESULT_FD``.

Started by :mod:`videorl_rewards.sandbox` (inside bubblewrap when isolated), under the rlimits the
scorer set before the sandbox started. Reads ``{"code", "tests", "mode", "audit_hook", "init",
"limits"}`` as JSON on stdin, points stdin, stdout and (once it is set up) stderr at ``/dev/null``, lowers
the process limit, installs (with ``audit_hook``, the unisolated fallback only) an audit hook that
refuses processes, signals, sockets, native-code loading and writes outside the working directory, then
runs the code and reports one JSON line per test on ``RESULT_FD``, then ``{"done": true}``:

- ``mode="assert"``: the code runs once, then each test (Python statements, e.g. ``assert f(2) == 4``)
  runs in its namespace: ``{"test": i, "ok": bool}``;
- ``mode="io"``: the code runs once per test as ``__main__`` with the test's input on stdin:
  ``{"test": i, "output": str}`` (the parent compares it with the expected output).

With ``init`` (isolated: this process is the PID namespace's init), the code runs in a child, and this
process only waits, out of the program's reach (see ``_become_init``).

Neither the sandbox nor the hook protects the score: code running in this interpreter could forge its
assert results, which is why input/output tests are compared by the parent. The hook is no security
boundary either (a program can route around it); the kernel's isolation is.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import sys

_REFUSED_EVENTS = {
    "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen",
    "os.kill", "os.killpg", "signal.pthread_kill", "resource.setrlimit", "resource.prlimit",
    "socket.__new__", "socket.bind", "socket.connect", "socket.getaddrinfo", "socket.sendto",
    "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function", "os.chroot", "os.setuid",
    "os.setgid", "pty.spawn", "webbrowser.open",
}  # fmt: skip
_REFUSED_IMPORTS = {
    "ctypes",
    "_ctypes",
    "_posixsubprocess",
    "_socket",
    "cffi",
    "_cffi_backend",
    "_multiprocessing",
}
_PATH_EVENTS = {
    "os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1), "os.symlink": (1,),
    "os.link": (1,), "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,),
    "os.chflags": (0,), "os.lchflags": (0,), "shutil.rmtree": (0,), "os.mkfifo": (0,), "os.mknod": (0,),
}  # fmt: skip
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_PR_SET_DUMPABLE = 4


def _install_hook(root: str) -> None:
    root = os.path.realpath(root)

    def inside(path: object) -> bool:
        if isinstance(path, int):
            return True  # an already open descriptor
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        real = os.path.realpath(os.fspath(path))  # type: ignore[call-overload]
        return real == root or real.startswith(root + os.sep)

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event in _REFUSED_EVENTS:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import" and str(args[0]).split(".")[0] in _REFUSED_IMPORTS:
            raise ImportError(f"sandbox: importing {args[0]} is not allowed")
        if event == "open":
            path, mode, flags = args
            writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & _WRITE_FLAGS)  # type: ignore[operator]
            if writes and path is not None and not inside(path):
                raise PermissionError(f"sandbox: writing {path!r} outside the working directory")
        elif event in _PATH_EVENTS:
            for i in _PATH_EVENTS[event]:
                if i < len(args) and args[i] is not None and not inside(args[i]):
                    raise PermissionError(f"sandbox: {event} on {args[i]!r} outside the working directory")

    sys.addaudithook(hook)


class _CappedOutput(io.StringIO):
    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def write(self, text: str) -> int:
        if self.tell() + len(text) > self.limit:
            raise OSError(f"sandbox: output over {self.limit} characters")
        return super().write(text)


def _lower(kind: int, value: int) -> None:
    """Set soft and hard limit to ``value``, or keep a hard limit that is lower already."""
    hard = resource.getrlimit(kind)[1]
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (value, value))


def _set_dumpable(value: int) -> None:
    import ctypes  # only here: the unisolated fallback's hook refuses ctypes to the program

    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "sandbox: prctl(PR_SET_DUMPABLE) failed")


def _become_init(devnull: int) -> None:
    """As the PID namespace's init: fork, return in the child (which runs the program), and in this
    process reap children until that child ends, then end with its status (which ends the namespace).

    This process is not dumpable (no one in the namespace may open its ``/proc/1/mem`` or
    ``/proc/1/fd``, or take its descriptors) and keeps only ``/dev/null`` open; it has the limits and
    the seccomp filter of the program, and the kernel does not deliver it the namespace's signals that it
    has no handler for, SIGINT included (Python's own handler would let a signal end it)."""
    _set_dumpable(0)  # before the fork: the child cannot reach it in between
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _set_dumpable(1)  # the program's own process is an ordinary one
        return
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.closerange(3, 2**31 - 1)  # the result pipe, whatever its number
    while True:
        pid, status = os.wait()  # orphans of the program too
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            os._exit(code if code >= 0 else 128 - code)


def main() -> None:
    config = json.load(sys.stdin)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):  # the config is not the program's to read; its own output is captured per test
        os.dup2(devnull, fd)
    result = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    limits = config["limits"]
    # The process limit is counted per user namespace: set here, inside the sandbox's, before the fork
    # below, it bounds the whole sandbox (set before bwrap it would count the host user's processes).
    if limits.get("processes"):
        _lower(resource.RLIMIT_NPROC, limits["processes"])
    sys.stdin = io.StringIO("")
    code = compile(config["code"], "<answer>", "exec")
    tests = config["tests"]
    if config.get("init"):
        _become_init(devnull)
    if config.get("audit_hook"):
        _install_hook(os.getcwd())
    os.dup2(devnull, 2)  # until here, stderr is the parent's: it reports a harness that failed to start
    os.close(devnull)
    result.write('{"ready": true}\n')  # the parent tells a sandbox that never started from bad code
    if config["mode"] == "assert":
        namespace: dict[str, object] = {"__name__": "__solution__"}
        try:
            exec(code, namespace)
            loaded = True
        except BaseException:
            loaded = False
        for i, test in enumerate(tests):
            ok = False
            if loaded:
                try:
                    exec(compile(test, f"<test {i}>", "exec"), namespace)
                    ok = True
                except BaseException:
                    ok = False
            result.write(json.dumps({"test": i, "ok": ok}) + "\n")
    else:
        stdout = sys.stdout
        for i, test_input in enumerate(tests):
            sys.stdin = io.StringIO(test_input)
            sys.stdout = capture = _CappedOutput(limits["output_chars"])
            with contextlib.suppress(BaseException):  # SystemExit too: the output so far is the answer
                exec(code, {"__name__": "__main__"})
            sys.stdout = stdout
            result.write(json.dumps({"test": i, "output": capture.getvalue()}) + "\n")
    result.write('{"done": true}\n')  # the parent ends the run here, whatever the program left running


if __name__ == "__main__":
    main()
