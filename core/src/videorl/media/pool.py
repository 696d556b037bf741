"""A small process pool whose tasks have a deadline: a task past it, or one that crashes its worker,
costs that worker (killed and replaced) and yields a failure; the other tasks go on."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from types import TracebackType
from typing import Any

from videorl.errors import VideorlError

_PRELOAD = ["videorl.media.build"]


@dataclass
class TaskResult:
    index: int
    ok: bool
    value: Any  # the task's return value, or the failure reason
    stage: str = "task"  # "task" | "timeout" | "crash"


def _worker(conn: Connection) -> None:
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        index, fn, args = message
        try:
            conn.send((index, True, fn(*args)))
        except VideorlError as exc:
            conn.send((index, False, str(exc)))
        except Exception as exc:  # any failure of one task is reported, never fatal
            conn.send((index, False, f"{type(exc).__name__}: {exc}"))


@dataclass
class _Slot:
    process: Any
    conn: Connection
    task: int | None = None
    deadline: float = float("inf")


class WorkerPool:
    """``workers`` processes (forkserver where available, preloaded with the media stack)."""

    def __init__(self, workers: int) -> None:
        if "forkserver" in mp.get_all_start_methods():
            self._ctx: Any = mp.get_context("forkserver")
            self._ctx.set_forkserver_preload(_PRELOAD)
        else:
            self._ctx = mp.get_context("spawn")
        self._slots = [self._start() for _ in range(max(1, workers))]

    def _start(self) -> _Slot:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(target=_worker, args=(child,), daemon=True)
        process.start()
        child.close()
        return _Slot(process, parent)

    def _replace(self, i: int) -> None:
        slot = self._slots[i]
        slot.process.kill()
        slot.process.join()
        slot.conn.close()
        self._slots[i] = self._start()

    def run(self, fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], *, timeout: float | None) -> Iterator[TaskResult]:
        """Run ``fn(*args)`` for each task; yield results as they complete. ``fn`` must be importable
        by name (a module-level function); ``timeout`` bounds each task in seconds."""
        pending = deque(range(len(tasks)))
        slots = self._slots
        while pending or any(s.task is not None for s in slots):
            for i in range(len(slots)):
                if slots[i].task is None and pending:
                    if not slots[i].process.is_alive():
                        self._replace(i)
                    slot = slots[i]
                    slot.task = pending.popleft()
                    slot.deadline = time.monotonic() + timeout if timeout else float("inf")
                    slot.conn.send((slot.task, fn, tasks[slot.task]))
            busy = [i for i, s in enumerate(slots) if s.task is not None]
            soonest = min(slots[i].deadline for i in busy) - time.monotonic()
            waitables = [slots[i].conn for i in busy] + [slots[i].process.sentinel for i in busy]
            ready = set(wait(waitables, None if soonest == float("inf") else max(soonest, 0.0)))
            now = time.monotonic()
            for i in busy:
                slot, task = slots[i], slots[i].task
                assert task is not None
                if slot.conn in ready:
                    try:
                        index, ok, value = slot.conn.recv()
                    except (EOFError, OSError):
                        pass
                    else:
                        slot.task = None
                        yield TaskResult(index, ok, value)
                        continue
                if slot.process.sentinel in ready or not slot.process.is_alive():
                    code = slot.process.exitcode
                    self._replace(i)
                    yield TaskResult(task, False, f"the worker process died (exit code {code})", "crash")
                elif now >= slot.deadline:
                    self._replace(i)
                    yield TaskResult(task, False, f"timed out after {timeout:g} s", "timeout")

    def close(self) -> None:
        """Stop the workers: idle ones when they read the stop message, busy ones (interrupted runs) now."""
        for slot in self._slots:
            if slot.task is not None:
                slot.process.kill()
            with contextlib.suppress(OSError, ValueError):
                slot.conn.send(None)
        for slot in self._slots:
            slot.process.join(timeout=5)
            if slot.process.is_alive():
                slot.process.kill()
                slot.process.join()
            slot.conn.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
