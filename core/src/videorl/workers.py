"""Killable workers: where videorl runs code that may hang or crash on its input, under a time limit.

Three kinds, one rule (a task past its deadline costs its worker, never the caller):

- :class:`WorkerPool`: processes that run importable functions, each task with a deadline; a task past
  it, or one that crashes its worker, kills and replaces that worker and yields a failure (``cache
  build``, ``videorl reward --workers``).
- :class:`DeadlineThreads`: daemon threads for synchronous rewards (the reward router). Python cannot
  kill a thread: one stuck past its time limit is abandoned (it never blocks the interpreter's exit)
  and another thread takes its place.
- :class:`LineWorkers`: long-lived helper processes that answer JSON lines on a pipe of their own,
  started as concurrent requests need them up to a limit; one past its deadline is killed with its
  whole process group, one that dies is replaced and the request retried once (the math reward).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import multiprocessing as mp
import multiprocessing.forkserver as mp_forkserver
import os
import pickle
import queue
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from types import TracebackType
from typing import Any

from videorl.errors import VideorlError

__all__ = ["DeadlineThreads", "LineWorker", "LineWorkers", "TaskResult", "WorkerPool"]

logger = logging.getLogger("videorl.workers")


# --- processes that run functions ------------------------------------------------------------------


@dataclass
class TaskResult:
    """The outcome of task ``index`` of :meth:`WorkerPool.run`."""

    index: int
    ok: bool
    value: Any  # the task's return value, or the failure reason
    stage: str = "task"  # "task" | "timeout" | "crash"


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent() -> None:
    """Linux: have the kernel kill this worker when its parent dies, whatever kills the parent (even
    ``SIGKILL``, which runs no cleanup); elsewhere the pool kills its workers when it is closed.

    A worker's parent is the forkserver, which exits once no process holds its "alive" descriptor: the
    pool's owner, and each forkserver child, which inherits it (for children that start processes of
    their own). A worker starts none, so it closes its copy: the forkserver then exits with the owner,
    and the worker with the forkserver."""
    if not sys.platform.startswith("linux"):
        return
    server = getattr(mp_forkserver, "_forkserver", None)
    alive = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(alive, int):
        with contextlib.suppress(OSError):
            os.close(alive)
        server._forkserver_alive_fd = None  # type: ignore[union-attr]
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return
    parent = os.getppid()
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _worker(conn: Connection) -> None:
    _die_with_parent()
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        index, payload = message
        try:
            fn, args = pickle.loads(payload)  # here, so that a task this process cannot import is its failure
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
    """``workers`` processes that run importable functions, each task with a deadline.

    Workers start from a forkserver (where available) that has imported the ``preload`` modules, so
    a replacement starts in milliseconds; a task past its deadline, or one that crashes its worker, costs
    that worker (killed and replaced) and yields a failed :class:`TaskResult`; the other tasks go on.
    Workers die with their parent (Linux: a parent-death signal), so a killed caller leaves none behind.
    """

    def __init__(self, workers: int, *, preload: Sequence[str] = ()) -> None:
        if "forkserver" in mp.get_all_start_methods():
            self._ctx: Any = mp.get_context("forkserver")
            self._ctx.set_forkserver_preload(list(preload))
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

    def run(
        self, fn: Callable[..., Any], tasks: Sequence[tuple[Any, ...]], *, timeout: float | None
    ) -> Iterator[TaskResult]:
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
                    slot.conn.send((slot.task, pickle.dumps((fn, tasks[slot.task]))))
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


# --- threads for synchronous calls -----------------------------------------------------------------


#: an item's outcome in :meth:`DeadlineThreads.run_each`: ("ok", value), ("error", exception) or
#: ("timeout", None)
Outcome = tuple[str, Any]


class _EachJob:
    """Items run one after another in a pool thread; ``current`` is (index, start time) of the item in
    progress, ``stop`` tells an abandoned job to drop the rest."""

    def __init__(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> None:
        self.fn = fn
        self.items = items
        self.outcomes: list[Outcome] = []
        self.current: tuple[int, float] | None = None
        self.stop = False

    def run(self) -> None:
        for index, item in enumerate(self.items):
            if self.stop:
                return
            self.current = (index, time.monotonic())
            try:
                outcome: Outcome = ("ok", self.fn(item))
            except Exception as exc:
                outcome = ("error", exc)
            if self.stop:
                return
            self.outcomes.append(outcome)


class DeadlineThreads:
    """Up to ``size`` daemon threads, started on demand, for calls awaited with a time limit."""

    def __init__(self, size: int) -> None:
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = (
            queue.SimpleQueue()
        )
        self._size = size
        self._started = 0
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self._queue.put((future, fn, args))
        with self._lock:
            if self._started < self._size:
                self._started += 1
                threading.Thread(target=self._work, name="videorl-worker", daemon=True).start()
        return future

    def _abandon(self) -> None:
        """A thread is stuck in a call that timed out: allow one more thread in its place."""
        with self._lock:
            self._size += 1

    def _work(self) -> None:
        while True:
            future, fn, args = self._queue.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:
                future.set_exception(exc)

    async def call(self, fn: Callable[[Any], Any], arg: Any, timeout: float | None) -> Any:
        """``fn(arg)`` in a thread; ``TimeoutError`` after ``timeout`` seconds (the thread is abandoned)."""
        future = self.submit(fn, arg)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except TimeoutError:
            if not future.done():
                self._abandon()
            raise

    async def run_each(
        self, fn: Callable[[Any], Any], items: Sequence[Any], timeout: float | None
    ) -> list[Outcome]:
        """``fn(item)`` for each item, one after another in one thread, each within ``timeout`` seconds:
        an item past it is marked ``timeout`` and the rest continue in a fresh thread."""
        outcomes: list[Outcome] = []
        while len(outcomes) < len(items):
            job = _EachJob(fn, items[len(outcomes) :])
            waiter = asyncio.wrap_future(self.submit(job.run))
            while True:
                current = job.current
                wait = (
                    timeout if timeout is None or current is None else current[1] + timeout - time.monotonic()
                )
                finished, _ = await asyncio.wait({waiter}, timeout=None if wait is None else max(0.0, wait))
                if finished:
                    outcomes += job.outcomes
                    break
                current = job.current
                if (
                    timeout is not None
                    and current is not None
                    and time.monotonic() - current[1] >= timeout
                    and len(job.outcomes) == current[0]
                ):
                    job.stop = True
                    self._abandon()
                    outcomes += job.outcomes[: current[0]]
                    outcomes.append(("timeout", None))
                    break
        return outcomes


# --- helper processes that answer JSON lines -------------------------------------------------------


class LineWorker:
    """One helper process (``argv``) and its line-buffered reply pipe.

    The process runs in a session of its own, so :meth:`kill` ends everything it started. It must
    write one JSON line (any, e.g. ``{"ready": true}``) once it is ready, then one reply line per
    request line.
    """

    def __init__(self, argv: Sequence[str], *, name: str, startup_timeout: float = 120.0) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._buffer = b""
        if self._read(startup_timeout) is None:
            self.kill()
            raise RuntimeError(f"the {name} did not start within {startup_timeout:.0f} s")

    def ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """The reply to ``request``, or ``None`` when it took longer than ``timeout`` seconds."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        return self._read(timeout)

    def _read(self, timeout: float) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise RuntimeError(f"the {self.name} exited (code {self.proc.poll()})")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def _kill_all(workers: list[LineWorker]) -> None:
    for worker in workers:
        worker.kill()


class LineWorkers:
    """Up to ``size`` :class:`LineWorker` processes of ``argv``, shared by concurrent callers.

    :meth:`ask` takes an idle worker (starting one while fewer than ``size`` exist, else waiting for
    one). A worker past the deadline is killed and :meth:`ask` raises ``TimeoutError``; one that dies
    under a request (killed by a signal, crashed) is replaced and the request retried once. Workers are
    killed by :meth:`close`, when the pool is garbage-collected, or at exit.
    """

    def __init__(self, argv: Sequence[str], size: int, *, name: str, startup_timeout: float = 120.0) -> None:
        self.argv = list(argv)
        self.size = size
        self.name = name
        self.startup_timeout = startup_timeout
        self.workers: list[LineWorker] = []  # every live worker, idle or busy
        self._idle: list[LineWorker] = []
        self._starting = 0
        self._cond = threading.Condition()
        weakref.finalize(self, _kill_all, self.workers)

    def ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """The reply to ``request``; ``TimeoutError`` when a worker took longer than ``timeout`` seconds."""
        try:
            return self._ask(request, timeout)
        except TimeoutError:
            raise
        except (OSError, RuntimeError, ValueError) as exc:  # the worker died under the request
            logger.warning("the %s failed (%s); retrying on a new one", self.name, exc)
            return self._ask(request, timeout)

    def _ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        worker = self._take()
        try:
            reply = worker.ask(request, timeout)
        except (OSError, RuntimeError, ValueError):
            self._drop(worker)
            raise
        if reply is None:
            self._drop(worker)
            raise TimeoutError(f"the {self.name} took longer than {timeout} s")
        self._give(worker)
        return reply

    def _take(self) -> LineWorker:
        with self._cond:
            while not self._idle and len(self.workers) + self._starting >= self.size:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._starting += 1
        try:
            worker = LineWorker(self.argv, name=self.name, startup_timeout=self.startup_timeout)
        finally:
            with self._cond:
                self._starting -= 1
                self._cond.notify()
        with self._cond:
            self.workers.append(worker)
        return worker

    def _give(self, worker: LineWorker) -> None:
        with self._cond:
            if worker in self.workers:
                self._idle.append(worker)
                self._cond.notify()

    def _drop(self, worker: LineWorker) -> None:
        worker.kill()
        with self._cond:
            if worker in self.workers:
                self.workers.remove(worker)
            self._cond.notify()

    def close(self) -> None:
        """Stop the workers; the next request starts a new one."""
        with self._cond:
            workers = list(self.workers)
            self.workers.clear()
            self._idle.clear()
            self._cond.notify_all()
        _kill_all(workers)
