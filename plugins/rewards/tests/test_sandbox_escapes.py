"""Escape attempts against the code sandbox, each scored end to end by the code reward.

Every attempt is a program that tries to reach the host (the files of a victim folder, a run
directory and a home directory with a secret, the scorer's environment, the scorer and a sibling
process, the host's ``/dev/shm`` and network listeners) and sets ``ESCAPED`` only if, as far as it
can tell, it got there; the one test is ``assert ESCAPED``. After each call the test checks from
outside that nothing outside the sandbox changed (content, mtime, mode and link count of every file),
that no process of the run is left, that the scorer and its sibling are alive and not stopped, and
that the score is 0 (the answer is untagged, so no format credit either).

On a machine where the sandbox cannot isolate, only the refusal is checked (and the skip says so).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from videorl.api import ConfigError, RewardInput
from videorl_rewards.python_code import CodeReward
from videorl_rewards.sandbox import SANDBOX_UID, isolation

SECRET = "videorl-secret-" + secrets.token_hex(8)
MARK = "vrlesc" + secrets.token_hex(4)  # the process name every attempt gives itself (inherited by forks)

# {victim}, {run}, {home}: host folders; {scorer}, {sibling}: host pids; {port}, {abstract}: listeners
ATTACKS: dict[str, str] = {
    # the seven of the issue
    "remove_with_dir_fd": "os.remove('file.txt', dir_fd=os.open('{victim}', os.O_RDONLY))\nESCAPED = True",
    "patched_realpath": (
        "os.path.realpath = lambda p, *a, **k: os.getcwd()\n"
        "open('{victim}/file.txt', 'w').write('owned')\nESCAPED = True"
    ),
    "hard_link_then_append": (
        "os.link('{victim}/file.txt', 'h')\nopen('h', 'a').write('owned')\nESCAPED = True"
    ),
    "sqlite_outside": (
        "import sqlite3\nsqlite3.connect('{victim}/x.db').execute('create table t(x)')\nESCAPED = True"
    ),
    "chmod_through_fd": "os.chmod(os.open('{victim}/file.txt', os.O_RDONLY), 0)\nESCAPED = True",
    "utime_through_fd": "os.utime(os.open('{victim}/file.txt', os.O_RDONLY), (0, 0))\nESCAPED = True",
    "posix_shm": (
        "import _posixshmem\n"
        "_posixshmem.shm_open('/' + MARK, os.O_CREAT | os.O_RDWR, 0o600)\n"
        "ESCAPED = os.path.exists('/dev/shm/{host_shm}')"  # would see the host's /dev/shm
    ),
    "pidfd_kill_parent": (
        "import signal\nsignal.pidfd_send_signal(os.pidfd_open(os.getppid()), signal.SIGKILL)\n"
        "ESCAPED = os.getppid() == {scorer}"
    ),
    # signals
    "kill_scorer_by_pid": "os.kill({scorer}, signal.SIGKILL)\nESCAPED = True",
    "sigstop_parent": (
        "os.kill({scorer}, signal.SIGSTOP)\nos.kill(os.getppid(), signal.SIGSTOP)\nESCAPED = True"
    ),
    "kill_everything": "os.kill(-1, signal.SIGKILL)\nESCAPED = False  # success would show outside",
    "kill_sibling": "os.kill({sibling}, signal.SIGSTOP)\nESCAPED = True",
    # other processes' memory and /proc
    "ptrace_attach": (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "ESCAPED = any(libc.ptrace(16, p, 0, 0) == 0 for p in ({scorer}, {sibling}, 1))"
    ),
    "proc_mem_of_scorer": "f = open('/proc/{scorer}/mem', 'r+b')\nESCAPED = True",
    "proc_self_mem_then_scorer_environ": (
        "open('/proc/self/mem', 'r+b').close()\n"
        "ESCAPED = SECRET in open('/proc/{scorer}/environ', 'rb').read().decode('latin-1')"
    ),
    "proc_ppid_and_init": (
        "found = ''\nfor p in os.listdir('/proc'):\n"
        "    if p.isdigit():\n"
        "        try:\n            found += open(f'/proc/{{p}}/environ', 'rb').read().decode('latin-1')\n"
        "        except OSError:\n            pass\n"
        "ESCAPED = SECRET in found or os.path.exists('/proc/{scorer}')"
    ),
    "proc_root_of_others": (
        "ESCAPED = False\nfor p in os.listdir('/proc'):\n"
        "    if p.isdigit():\n"
        "        try:\n            open(f'/proc/{{p}}/root{victim}/file.txt', 'w').write('owned')\n"
        "            ESCAPED = True\n"
        "        except OSError:\n            pass"
    ),
    # links and races in the temp dir
    "symlink_out_of_tmp": (
        "os.symlink('{victim}/file.txt', 'link')\nos.symlink('{victim}', 'dirlink')\n"
        "open('link', 'w').write('owned')\nESCAPED = True"
    ),
    "symlink_swap_race": (
        "os.mkdir('d')\nopen('d/f', 'w').write('x')\n"
        "for _ in range(2000):\n"
        "    os.rename('d', 'old')\n    os.symlink('{victim}', 'd')\n    os.remove('d')\n    "
        "os.rename('old', 'd')\n"
        "os.symlink('{victim}', 'last')\nESCAPED = os.path.exists('last/file.txt')"
    ),
    "hard_link_race_to_host_files": (
        "import glob\nESCAPED = False\n"
        "for target in ['{victim}/file.txt', sys.executable, *glob.glob('/usr/bin/*')[:50]]:\n"
        "    try:\n        os.link(target, 'h')\n        open('h', 'a').write('x')\n        ESCAPED = True\n"
        "    except OSError:\n        pass"
    ),
    # what the scorer holds
    "inherited_descriptors": (
        "import stat\nESCAPED = False\nfor fd in range(3, 1024):\n"
        "    try:\n        if stat.S_ISREG(os.fstat(fd).st_mode):\n            os.write(fd, b'owned')\n"
        "            ESCAPED = True\n"
        "    except OSError:\n        pass"
    ),
    "environment_secrets": (
        "ESCAPED = SECRET in repr(dict(os.environ)) or SECRET in open('/proc/1/environ').read()"
    ),
    "home_directory": (
        "def holds_secret(folder):\n"
        "    for base, _, files in os.walk(folder):\n"
        "        for f in files:\n"
        "            try:\n"
        "                if SECRET in open(os.path.join(base, f), errors='replace').read(2**20):\n"
        "                    return True\n"
        "            except OSError:\n                pass\n"
        "    return False\n"
        "ESCAPED = any(holds_secret(d) for d in ('{home}', '{fresh_home}', os.path.expanduser('~'), '/root', "
        "'/home'))"
    ),
    "write_run_directory": (
        "ESCAPED = False\nfor p in ('{run}/checkpoints/owned', '../../../{run}/owned', '/work/owned', "
        "'/owned'):\n"
        "    try:\n        open(p, 'w').write('owned')\n        ESCAPED = True\n    except OSError:\n        "
        "pass"
    ),
    # resources
    "fork_bomb": (
        "n = 0\nwhile True:\n    try:\n        os.fork()\n        n += 1\n    except OSError:\n        pass\n"
        "    if n > 5000:\n        break\nESCAPED = True"
    ),
    "fill_the_disk": (
        "written = 0\ntry:\n    for i in range(10**6):\n"
        "        with open(f'fill{{i}}', 'wb') as f:\n            f.write(b'x' * 2**20)\n        written += "
        "2**20\n"
        "except OSError:\n    pass\nESCAPED = written > 200 * 2**20"
    ),
    "huge_stdout": (
        "for _ in range(300):\n    os.write(1, b'x' * 2**20)\n    os.write(2, b'x' * 2**20)\n"
        "print('x' * 10**8)\nESCAPED = False"
    ),
    "memory_bomb": "x = bytearray(8 * 2**30)\nESCAPED = True",
    "raise_own_limits": (
        "import resource\nresource.setrlimit(resource.RLIMIT_NPROC, (10**6, 10**6))\n"
        "resource.setrlimit(resource.RLIMIT_AS, (-1, -1))\nESCAPED = True"
    ),
    # the namespace's init, PID 1: its memory, its descriptors (the scorer's stderr, once), its limits
    "write_init_memory": (
        "ESCAPED = False\n"
        "for path, mode in (('/proc/1/mem', 'r+b'), ('/proc/1/fd/2', 'ab'), ('/proc/1/fd/1', 'ab')):\n"
        "    try:\n        open(path, mode).close()\n        ESCAPED = True\n"
        "    except OSError:\n        pass\n"
        "try:\n    ESCAPED = ESCAPED or bool(os.listdir('/proc/1/fd'))\nexcept OSError:\n    pass"
    ),
    "take_init_descriptors": (  # pidfd_getfd is 438 on both ABIs
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\npidfd = os.pidfd_open(1)\n"
        "ESCAPED = any(libc.syscall(438, pidfd, fd, 0) >= 0 for fd in range(64))"
    ),
    "process_vm_writev_into_init": (  # the program is a fork of PID 1: same addresses for old objects
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "class IoVec(ctypes.Structure):\n"
        "    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]\n"
        "code = ctypes.create_string_buffer(b'\\xcc' * 64)\n"
        "local, remote = IoVec(ctypes.addressof(code), 64), IoVec(id(os), 64)\n"
        "nr = {{'x86_64': 311, 'aarch64': 271}}[os.uname().machine]\n"
        "ESCAPED = libc.syscall(nr, 1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) >= 0"
    ),
    "a_process_without_limits": (  # every process of the sandbox, PID 1 included, has every limit
        "def soft(pid):\n    rows = open(f'/proc/{{pid}}/limits').read().splitlines()[1:]\n"
        "    return {{r[:26].strip(): r[26:47].strip() for r in rows}}\n"
        "if os.fork() == 0:\n    time.sleep(5)\n"
        "ESCAPED = False\nfor pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n    lim = soft(pid)\n"
        "    keys = ('Max cpu time', 'Max address space', 'Max file size', 'Max processes')\n"
        "    values = [lim[k] for k in keys]\n"
        "    ESCAPED = ESCAPED or 'unlimited' in values or int(lim['Max processes']) > 32 or "
        "int(lim['Max open files']) > 256"
    ),
    "signal_init": (
        "pidfd = os.pidfd_open(1)\n"
        "for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGINT, signal.SIGTERM):\n"
        "    os.kill(1, sig)\n    signal.pidfd_send_signal(pidfd, sig)\n"
        "time.sleep(0.2)\nESCAPED = False  # the init ending would end the run before the results"
    ),
    # every writable place counts against disk_mb (64 MiB), and memory outside it is refused
    "fill_every_writable_place": (
        "written = 0\n"
        "for folder in ('/dev', '/dev/shm', '/tmp', '.', '/', '/var/tmp', '/run', '/dev/mqueue', "
        "'/proc/self'):\n"
        "    try:\n        for i in range(100):\n"
        "            with open(f'{{folder}}/fill{{i}}', 'wb') as f:\n                f.write(b'x' * 2**20)\n"
        "            written += 2**20\n"
        "    except OSError:\n        pass\n"
        "ESCAPED = written > 64 * 2**20"
    ),
    "memory_outside_the_tmpfs": (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nESCAPED = False\n"
        "try:\n    os.memfd_create('m')\n    ESCAPED = True\nexcept OSError:\n    pass\n"
        "ESCAPED = ESCAPED or libc.shmget(0, 2**20, 0o1600) >= 0 or libc.msgget(0, 0o1600) >= 0 "
        "or libc.mq_open(b'/' + MARK.encode(), os.O_CREAT | os.O_RDWR, 0o600, None) >= 0"
    ),
    # the network
    "sockets_of_every_family": (
        "import socket\nESCAPED = False\n"
        "for fam in [getattr(socket, n) for n in dir(socket) if n.startswith('AF_')]:\n"
        "    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW):\n"
        "        try:\n            socket.socket(fam, kind).close()\n"
        "            ESCAPED = ESCAPED or fam not in (socket.AF_UNIX,)\n"
        "        except OSError:\n            pass\n"
        "for target in (('127.0.0.1', {port}), '\\0{abstract}'):\n"
        "    try:\n"
        "        s = socket.socket(socket.AF_INET if isinstance(target, tuple) else socket.AF_UNIX)\n"
        "        s.connect(target)\n        ESCAPED = True\n"
        "    except OSError:\n        pass"
    ),
    # native code and the kernel
    "ctypes_unlink": (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "ESCAPED = libc.unlink(b'{victim}/file.txt') == 0 or libc.syscall(87, b'{victim}/file.txt') == 0"
    ),
    "cffi_native": (
        "import cffi\nffi = cffi.FFI()\nffi.cdef('int unlink(const char *);')\n"
        "ESCAPED = ffi.dlopen(None).unlink(b'{victim}/file.txt') == 0"
    ),
    "remount_and_unmount": (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "ESCAPED = libc.mount(b'none', b'/usr', None, 0x20 | 0x1000, None) == 0 "
        "or libc.umount2(b'/tmp', 2) == 0 or libc.mount(b'tmpfs', b'/mnt', b'tmpfs', 0, None) == 0"
    ),
    "new_user_namespace": (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "ESCAPED = libc.unshare(0x10000000) == 0 or libc.unshare(0x00020000) == 0\n"
        "if os.uname().machine == 'x86_64':  # a raw clone(CLONE_NEWUSER | SIGCHLD): the child leaves at "
        "once\n"
        "    pid = libc.syscall(56, 0x10000011, 0, 0, 0, 0)\n"
        "    if pid == 0:\n        os._exit(0)\n"
        "    ESCAPED = ESCAPED or pid > 0"
    ),
    "kernel_tunables": "open('/proc/sys/kernel/core_pattern', 'w').write('|/bin/sh')\nESCAPED = True",
    "shell_out": (
        "import subprocess\nsubprocess.run(['/bin/sh', '-c', 'rm -rf {victim} {run}; kill -9 {scorer}'])\n"
        "ESCAPED = not os.path.exists('{victim}') and os.path.exists('/proc/{scorer}')"
    ),
    "outlive_the_timeout": (
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        time.sleep(30)\n        open('{victim}/late', 'w').write('owned')\n    os._exit(0)\n"
        "time.sleep(0.2)\nESCAPED = False"
    ),
    "outlive_after_done": (  # returns at once; the grandchild wants to live on after the results
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n        time.sleep(30)\n    os._exit(0)\n"
        "ESCAPED = False"
    ),
}

PRELUDE = (
    "import os, signal, sys, time\nMARK, SECRET = {mark!r}, {secret!r}\n"
    "try:\n    open('/proc/self/comm', 'w').write(MARK)\nexcept OSError:\n    pass\n"
)


def _snapshot(*roots: Path) -> dict[str, tuple[Any, ...]]:
    """Every file and folder under ``roots``: content hash, mtime, mode, link count, owner."""
    seen: dict[str, tuple[Any, ...]] = {}
    for root in roots:
        for path in [root, *sorted(root.rglob("*"))]:
            st = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
            seen[str(path)] = (digest, st.st_mtime_ns, st.st_mode, st.st_nlink, st.st_uid)
    return seen


def _left_in_shm(before: set[str]) -> list[str]:
    """The new entries of the host's /dev/shm that an attempt could have made: not this process's user's
    (tests running beside this one, under pytest-xdist, make their own there) or named as the attempts
    name what they write."""
    left = []
    for entry in set(os.listdir("/dev/shm")) - before:
        try:
            owner = Path("/dev/shm", entry).lstat().st_uid
        except FileNotFoundError:  # another test's, already removed
            continue
        if entry.startswith("fill") or MARK in entry or owner != os.getuid():
            left.append(entry)
    return sorted(left)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _live_processes() -> Iterator[tuple[int, str, int]]:
    """``(pid, name, uid)`` of every process that is not a zombie (a container's init may never reap
    the exited processes it inherits; they hold nothing but their pid)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if _state(int(entry)) != "Z":
                    name = Path(f"/proc/{entry}/comm").read_text().strip()
                    yield int(entry), name, os.stat(f"/proc/{entry}").st_uid
            except OSError:
                pass


def _processes_named(name: str) -> list[int]:
    return [pid for pid, comm, _ in _live_processes() if comm == name]


def _sandbox_user_processes() -> set[int]:
    return {pid for pid, _, uid in _live_processes() if uid == SANDBOX_UID}


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The host the attempts aim at: folders, a secret in the environment and home, listeners, a sibling."""
    if not isolation().available:
        pytest.skip(
            f"no isolated sandbox here ({isolation().reason}); test_refusal_without_isolation ran instead"
        )
    base = tmp_path_factory.mktemp("host")
    victim, run, home = base / "victim", base / "run", base / "home"
    (run / "checkpoints" / "step-1").mkdir(parents=True)
    (run / "checkpoints" / "step-1" / "model.safetensors").write_bytes(b"\0" * 1000)
    (run / "config.yaml").write_text("lr: 1e-6\n")
    victim.mkdir()
    (victim / "file.txt").write_text("keep me\n")
    (victim / "sub").mkdir()
    (victim / "sub" / "deep.bin").write_bytes(os.urandom(256))
    home.mkdir()
    (home / ".netrc").write_text(f"machine hub password {SECRET}\n")
    host_shm = Path("/dev/shm", f"videorl-escape-{MARK}")
    host_shm.write_text("host")
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    tcp.setblocking(False)
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(f"\0{MARK}")
    unix.listen()
    unix.setblocking(False)
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    held = open(victim / "file.txt", "ab")  # noqa: SIM115 - an inheritable descriptor held across the calls
    os.set_inheritable(held.fileno(), True)
    old = {k: os.environ.get(k) for k in ("VIDEORL_TEST_SECRET", "HOME")}
    os.environ.update(VIDEORL_TEST_SECRET=SECRET, HOME=str(home))
    try:
        yield {
            "victim": victim,
            "run": run,
            "home": home,
            "host_shm": host_shm.name,
            "scorer": os.getpid(),
            "sibling": sibling,
            "tcp": tcp,
            "unix": unix,
            "reward": CodeReward(timeout=1.0),
        }
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        held.close()
        sibling.kill()
        sibling.wait()
        tcp.close()
        unix.close()
        host_shm.unlink()


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_escape_attempt(name: str, host: dict[str, Any], fresh_home: Path) -> None:
    # the scorer's $HOME during the call is this test's own (the workspace's conftest): a secret there too
    (fresh_home / ".netrc").write_text(f"machine hub password {SECRET}\n")
    values = {k: host[k] for k in ("victim", "run", "home", "host_shm", "scorer")}
    values.update(sibling=host["sibling"].pid, port=host["tcp"].getsockname()[1], abstract=MARK)
    values.update(fresh_home=fresh_home)
    program = PRELUDE.format(mark=MARK, secret=SECRET) + ATTACKS[name].format(**values)
    roots = (host["victim"], host["run"], host["home"], fresh_home)
    before, shm_before = _snapshot(*roots), set(os.listdir("/dev/shm"))
    sandboxed_before = _sandbox_user_processes()
    start = time.monotonic()
    out = host["reward"](
        RewardInput(program, "code", "", sample_id=name, extra={"tests": ["assert ESCAPED"]})
    )
    elapsed = time.monotonic() - start
    assert out is not None and out.score == 0.0, f"{name}: scored {out}"
    assert _snapshot(*roots) == before, f"{name}: changed something outside the sandbox"
    assert not _left_in_shm(shm_before), f"{name}: left something in the host's /dev/shm"
    assert _processes_named(MARK) == [], f"{name}: a process of the run outlived the call"
    assert not _sandbox_user_processes() - sandboxed_before, f"{name}: a sandbox process outlived the call"
    assert host["sibling"].poll() is None and _state(host["sibling"].pid) not in "Tt", (
        f"{name}: hit the sibling"
    )
    assert _state(os.getpid()) not in "Tt"
    for listener in (host["tcp"], host["unix"]):
        with pytest.raises(BlockingIOError):
            listener.accept()
    assert elapsed < 1.0 + 10.0, f"{name}: took {elapsed:.1f} s"


def test_io_flood_is_capped_and_the_scorer_survives(host: dict[str, Any]) -> None:
    reward = CodeReward(timeout=1.0, max_output=10_000)
    program = "import os\nwhile True:\n    print('x' * 100000)\n    os.write(1, b'y' * 2**20)"
    out = reward(
        RewardInput(program, "code", "", sample_id="flood", extra={"tests": [{"input": "", "output": "1"}]})
    )
    assert out is not None and out.score == 0.0


def test_attacks_on_init_leave_the_program_a_normal_score(host: dict[str, Any]) -> None:
    """The program tries every way at its namespace's init, then answers: it is scored as usual."""
    names = ("write_init_memory", "take_init_descriptors", "process_vm_writev_into_init", "signal_init")
    attacks = "".join(
        f"try:\n    exec({ATTACKS[n].format(**{'victim': ''})!r})\nexcept OSError:\n    pass\n" for n in names
    )
    program = PRELUDE.format(mark=MARK, secret=SECRET) + attacks + "def add(a, b):\n    return a + b"
    out = host["reward"](RewardInput(program, "code", "", extra={"tests": ["assert add(1, 2) == 3"]}))
    assert out is not None and out.score == pytest.approx(0.9) and out.error is None, out


def _fake_bwrap(script: str) -> Path:
    """A ``bwrap`` that runs ``script`` (sh) instead, in a folder the sandbox user may enter."""
    folder = Path(tempfile.mkdtemp(prefix="videorl-fake-bwrap-"))
    folder.chmod(0o755)  # the sandbox user runs it when the scorer is root
    fake = folder / "bwrap"
    fake.write_text("#!/bin/sh\n" + script)
    fake.chmod(0o755)
    return fake


def test_stderr_is_a_bounded_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the sandbox's processes write to stderr reaches the scorer through a pipe of which it keeps
    the last ``STDERR_KEPT`` bytes (it was a host file: 256 MiB written into it from PID 1)."""
    from videorl_rewards import sandbox

    fake = _fake_bwrap(
        'yes x | head -c 20000000 >&2\necho "bwrap: stderr is $(readlink /proc/self/fd/2)" >&2\nexit 1\n'
    )
    real_which = sandbox.shutil.which
    monkeypatch.setattr(sandbox.shutil, "which", lambda n: str(fake) if n == "bwrap" else real_which(n))
    try:
        start = time.monotonic()
        with pytest.raises(sandbox.SandboxUnavailable) as failed:
            sandbox.run_python("", ["pass"], mode="assert", limits=sandbox.Limits())
        assert time.monotonic() - start < 10.0
    finally:
        shutil.rmtree(fake.parent)
    message = str(failed.value)
    assert message.startswith("the code sandbox did not start (exit code 1): ")
    assert re.search(r"bwrap: stderr is pipe:\[\d+\]$", message), message[-200:]
    assert len(message) < sandbox.STDERR_KEPT + 100


def test_refusal_without_isolation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the kernel offers no user namespaces (simulated: a bwrap that fails as bwrap fails there),
    the code reward refuses to run, naming the cause and the opt-in."""
    from videorl_rewards import sandbox

    fake = _fake_bwrap(
        "echo 'bwrap: No permissions to create new namespace, likely because the kernel does "
        "not allow non-privileged user namespaces.' >&2\nexit 1\n"
    )
    real_which = sandbox.shutil.which
    monkeypatch.setattr(sandbox.shutil, "which", lambda n: str(fake) if n == "bwrap" else real_which(n))
    isolation.cache_clear()
    try:
        assert isolation().level == "none"
        assert "No permissions to create new namespace" in isolation().reason
        with pytest.raises(ConfigError, match="cannot isolate.*No permissions.*unsafe_no_isolation"):
            CodeReward()
    finally:
        isolation.cache_clear()
        shutil.rmtree(fake.parent)


def test_signals_do_not_reach_the_host() -> None:
    """The sandbox's own view: no host process is visible, and the parent it sees is its namespace's init."""
    if not isolation().available:
        pytest.skip("no isolated sandbox here; test_refusal_without_isolation ran instead")
    reward = CodeReward(timeout=2.0)
    program = (
        "import os\nPIDS = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\nPPID = os.getppid()"
    )
    out = reward(RewardInput(program, "code", "", extra={"tests": ["assert PIDS == [1, 2] and PPID == 1"]}))
    assert out is not None and out.score == pytest.approx(0.9), out


def test_the_sandbox_dies_with_the_scorer(tmp_path: Path) -> None:
    """A scorer killed mid-run (SIGKILL: no cleanup of its own) takes the whole sandbox with it."""
    if not isolation().available:
        pytest.skip("no isolated sandbox here; test_refusal_without_isolation ran instead")
    mark = "vrldie" + secrets.token_hex(4)
    program = (
        f"open('/proc/self/comm', 'w').write({mark!r})\nimport os, time\n"
        "if os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\ntime.sleep(60)"
    )
    scorer = (
        "import os, signal, threading, time\nfrom videorl_rewards.sandbox import Limits, run_python\n"
        f"threading.Thread(target=run_python, args=({program!r}, ['pass']), "
        "kwargs=dict(mode='assert', limits=Limits(seconds=30)), daemon=True).start()\n"
        "def named(pid):\n    try:\n"
        f"        return open(f'/proc/{{pid}}/comm').read().strip() == {mark!r}\n"
        "    except OSError:  # a process of the machine's that ended meanwhile\n        return False\n"
        "while len([p for p in os.listdir('/proc') if p.isdigit() and named(p)]) < 2:\n"
        "    time.sleep(0.05)\n"
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    proc = subprocess.run([sys.executable, "-c", scorer], timeout=60)
    assert proc.returncode == -9
    deadline = time.monotonic() + 5.0
    while _processes_named(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_named(mark) == []


@pytest.mark.slow
def test_videorl_reward_survives_a_program_that_signals_its_parent(tmp_path: Path) -> None:
    """The issue's report: ``pidfd_send_signal(pidfd_open(getppid()), SIGKILL)`` killed ``videorl reward
    --workers 2`` (exit 137, every row lost). Now the signals reach nothing, and every row is scored
    as its program deserves (right, untagged: 0.9)."""
    if not isolation().available:
        pytest.skip("no isolated sandbox here; test_refusal_without_isolation ran instead")
    program = (
        "import os, signal\nsignal.pidfd_send_signal(os.pidfd_open(os.getppid()), signal.SIGKILL)\n"
        "os.kill(os.getppid(), signal.SIGSTOP)\ndef add(a, b):\n    return a + b"
    )
    rows = tmp_path / "rows.jsonl"
    row = {"problem": "add", "problem_type": "code", "tests": ["assert add(1, 2) == 3"], "response": program}
    rows.write_text("".join(json.dumps({"id": f"r{i}", **row}) + "\n" for i in range(12)))
    out = tmp_path / "out.jsonl"
    videorl = Path(sys.executable).with_name("videorl")
    proc = subprocess.run(
        [str(videorl), "reward", "--input", str(rows), "--output", str(out), "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in scored] == [f"r{i}" for i in range(12)]
    assert all(r["scores"] == [pytest.approx(0.9)] for r in scored)
