"""The seccomp filter of the code sandbox, as the classic-BPF program bubblewrap's ``--seccomp`` loads.

A deny list on top of the namespaces: the kernel interfaces a Python program has no use for and that
are the usual ways to attack the kernel or a neighbour (``ptrace``, ``process_vm_*``, ``pidfd_getfd``,
mounts, ``unshare``/``setns``, ``bpf``, ``perf_event_open``, ``userfaultfd``, keyrings, ``io_uring``,
module and kexec loading, file handles, ``kcmp``, ``personality``) or to hold memory outside the
sandbox's size-capped tmpfs (``memfd_create``, ``memfd_secret``, System V shared memory and message
queues, POSIX message queues) fail with ``EPERM``; ``socket`` for any family
but ``AF_UNIX`` fails with ``EAFNOSUPPORT`` (the network namespace has no interfaces, but not every
family is namespaced, e.g. ``AF_VSOCK``); ``clone3`` fails with ``ENOSYS`` so that libc falls back to
``clone``, which fails with ``EPERM`` when asked for a user namespace (the only kind a process without
capabilities may create; bubblewrap's ``--disable-userns`` refuses it too). A system call of
another ABI (32-bit ``int 0x80``, x32) kills the process, since its numbers differ.

Only x86-64 and AArch64 are described; elsewhere :func:`program` is ``None`` and the sandbox runs with
its namespaces only (``isolation().level`` says which).
"""

from __future__ import annotations

import errno
import platform
import socket
import struct

_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_KILL_PROCESS = 0x80000000
_ERRNO = 0x00050000
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data
_X32_BIT = 0x40000000
_CLONE_NEWUSER = 0x10000000

_DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "unshare",
    "setns", "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "kexec_load", "kexec_file_load",
    "init_module", "finit_module", "delete_module", "reboot", "swapon", "swapoff", "open_by_handle_at",
    "name_to_handle_at", "acct", "quotactl", "syslog", "kcmp", "fanotify_init", "personality", "fsopen",
    "fsconfig", "fsmount", "move_mount", "open_tree", "mount_setattr", "pidfd_getfd", "memfd_create",
    "memfd_secret", "shmget", "msgget", "mq_open",
)  # fmt: skip

# (audit architecture, syscall numbers), from the kernel's unistd headers
_ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,
        dict(
            ptrace=101, process_vm_readv=310, process_vm_writev=311, mount=165, umount2=166,
            pivot_root=155, unshare=272, setns=308, bpf=321, perf_event_open=298, userfaultfd=323,
            keyctl=250, add_key=248, request_key=249, io_uring_setup=425, io_uring_enter=426,
            io_uring_register=427, kexec_load=246, kexec_file_load=320, init_module=175,
            finit_module=313, delete_module=176, reboot=169, swapon=167, swapoff=168,
            open_by_handle_at=304, name_to_handle_at=303, acct=163, quotactl=179, syslog=103, kcmp=312,
            fanotify_init=300, personality=135, fsopen=430, fsconfig=431, fsmount=432, move_mount=429,
            open_tree=428, mount_setattr=442, pidfd_getfd=438, memfd_create=319, memfd_secret=447,
            shmget=29, msgget=68, mq_open=240, socket=41, clone3=435, clone=56,
        ),
    ),
    "aarch64": (
        0xC00000B7,
        dict(
            ptrace=117, process_vm_readv=270, process_vm_writev=271, mount=40, umount2=39,
            pivot_root=41, unshare=97, setns=268, bpf=280, perf_event_open=241, userfaultfd=282,
            keyctl=219, add_key=217, request_key=218, io_uring_setup=425, io_uring_enter=426,
            io_uring_register=427, kexec_load=104, kexec_file_load=294, init_module=105,
            finit_module=273, delete_module=106, reboot=142, swapon=224, swapoff=225,
            open_by_handle_at=265, name_to_handle_at=264, acct=89, quotactl=60, syslog=116, kcmp=272,
            fanotify_init=262, personality=92, fsopen=430, fsconfig=431, fsmount=432, move_mount=429,
            open_tree=428, mount_setattr=442, pidfd_getfd=438, memfd_create=279, memfd_secret=447,
            shmget=194, msgget=186, mq_open=180, socket=198, clone3=435, clone=220,
        ),
    ),
}  # fmt: skip


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes | None:
    """The filter for ``machine`` (default: this one), or ``None`` where none is described."""
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit_arch, numbers = arch
    ops = [
        _op(_LD_ABS, _ARCH),
        _op(_JEQ, audit_arch, 1, 0),
        _op(_RET, _KILL_PROCESS),
        _op(_LD_ABS, _NR),
    ]
    if audit_arch == _ARCHES["x86_64"][0]:
        ops += [_op(_JGE, _X32_BIT, 0, 1), _op(_RET, _KILL_PROCESS)]
    for name in _DENIED:
        ops += [_op(_JEQ, numbers[name], 0, 1), _op(_RET, _ERRNO | errno.EPERM)]
    ops += [_op(_JEQ, numbers["clone3"], 0, 1), _op(_RET, _ERRNO | errno.ENOSYS)]
    ops += [
        _op(_JEQ, numbers["clone"], 0, 3),
        _op(_LD_ABS, _ARG0),  # the flags (the first argument on both ABIs)
        _op(_JSET, _CLONE_NEWUSER, 0, 1),
        _op(_RET, _ERRNO | errno.EPERM),
        _op(_LD_ABS, _NR),
    ]
    ops += [
        _op(_JEQ, numbers["socket"], 0, 3),
        _op(_LD_ABS, _ARG0),  # the family
        _op(_JEQ, socket.AF_UNIX, 1, 0),
        _op(_RET, _ERRNO | errno.EAFNOSUPPORT),
        _op(_RET, _ALLOW),
    ]
    return b"".join(ops)
