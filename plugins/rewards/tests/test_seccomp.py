"""The code sandbox's seccomp filter, run by a small classic-BPF interpreter on hand-picked calls."""

from __future__ import annotations

import errno
import socket
import struct

import pytest

from videorl_rewards import _seccomp

ALLOW, KILL = 0x7FFF0000, 0x80000000


def errno_of(value: int) -> int:
    return 0x00050000 | value


def run(program: bytes, arch: int, nr: int, arg0: int = 0) -> int:
    """The filter's verdict for one system call (``struct seccomp_data`` with ``args[0]``)."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    ops = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = ops[pc]
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == 0x06:  # ret k
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if taken else jf
        pc += 1


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_verdicts(machine: str) -> None:
    program = _seccomp.program(machine)
    assert program is not None
    arch, nr = _seccomp._ARCHES[machine]
    getpid = {"x86_64": 39, "aarch64": 172}[machine]
    assert run(program, arch, getpid) == ALLOW
    assert run(program, arch, nr["ptrace"]) == errno_of(errno.EPERM)
    assert run(program, arch, nr["mount"]) == errno_of(errno.EPERM)
    assert run(program, arch, nr["io_uring_setup"]) == errno_of(errno.EPERM)
    for name in ("pidfd_getfd", "process_vm_writev", "memfd_create", "shmget", "msgget", "mq_open"):
        assert run(program, arch, nr[name]) == errno_of(errno.EPERM), name
    assert run(program, arch, {"x86_64": 434, "aarch64": 434}[machine]) == ALLOW  # pidfd_open
    assert run(program, arch, nr["clone3"]) == errno_of(errno.ENOSYS)  # libc falls back to clone
    assert run(program, arch, nr["clone"], 0x11) == ALLOW  # fork: SIGCHLD only
    assert run(program, arch, nr["clone"], 0x10000000 | 0x11) == errno_of(errno.EPERM)  # CLONE_NEWUSER
    assert run(program, arch, nr["socket"], socket.AF_UNIX) == ALLOW
    for family in (socket.AF_INET, socket.AF_INET6, socket.AF_PACKET, 40):  # 40: AF_VSOCK
        assert run(program, arch, nr["socket"], family) == errno_of(errno.EAFNOSUPPORT)
    assert run(program, 0x40000003, getpid) == KILL  # another ABI (i386)
    if machine == "x86_64":
        assert run(program, arch, 0x40000000 | getpid) == KILL  # x32


def test_unknown_machines_get_no_filter() -> None:
    assert _seccomp.program("riscv64") is None
