"""Math: symbolic equivalence of the answer and the ground truth via ``math-verify``, in worker
processes that are killed when an answer makes sympy hang."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from typing import Any

from videorl.api import ConfigError, RewardInput, TaskReward, answers

_STARTUP_SECONDS = 120.0
logger = logging.getLogger("videorl.rewards")


class _Worker:
    """One ``_math_worker`` process and its line-buffered reply pipe."""

    def __init__(self, sympy_timeout: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "videorl_rewards._math_worker", str(sympy_timeout)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._buffer = b""
        if self._read(_STARTUP_SECONDS) is None:
            self.kill()
            raise RuntimeError(f"the math-verify worker did not start within {_STARTUP_SECONDS:.0f} s")

    def ask(self, gold: str, pred: str, timeout: float) -> dict[str, Any] | None:
        """The worker's reply, or ``None`` when it took longer than ``timeout`` seconds."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"gold": gold, "pred": pred}).encode() + b"\n")
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
                    raise RuntimeError(f"the math-verify worker exited (code {self.proc.poll()})")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def _kill_all(workers: list[_Worker]) -> None:
    for worker in workers:
        worker.kill()


class MathReward(TaskReward):
    """Accuracy 1 when ``math_verify.verify(parse(truth), parse(answer))`` holds, else 0.

    Each check runs in one of ``processes`` worker processes (default: one per core, at most 4, started
    as concurrent checks need them; a check costs milliseconds of sympy). A check that takes longer than
    ``timeout`` seconds (default 10) is killed (its whole process group) and the answer scores 0 with
    the part ``timeout`` = 1, so no answer can stall a step. ``sympy_timeout`` (whole seconds, default a
    third of ``timeout``; 0 turns it off) also arms math-verify's own signal timeouts, which end most
    slow checks without a restart. A worker that dies under a check (killed by a signal, crashed) is
    replaced and the check retried once on the new one; one that is stopped is killed at the timeout.
    Answers longer than ``max_chars`` (2,000) do not fit the type.
    """

    name = "math"

    def __init__(
        self,
        *,
        timeout: float = 10.0,
        sympy_timeout: int | None = None,
        processes: int | None = None,
        max_chars: int = 2000,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ConfigError(f"math: timeout must be a positive number of seconds, got {timeout!r}")
        processes = min(4, os.cpu_count() or 1) if processes is None else processes
        if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
            raise ConfigError(f"math: processes must be a positive integer, got {processes!r}")
        self.timeout = float(timeout)
        self.sympy_timeout = max(1, int(timeout // 3)) if sympy_timeout is None else int(sympy_timeout)
        self.processes = processes
        self.max_chars = max_chars
        self._idle: list[_Worker] = []
        self._workers: list[_Worker] = []  # every live worker, idle or busy
        self._starting = 0
        self._cond = threading.Condition()
        weakref.finalize(self, _kill_all, self._workers)

    def parse_answer(self, text: Any, inp: RewardInput) -> str | None:
        text = answers.strip_math_delimiters(str(text))
        return text if text and len(text) <= self.max_chars else None

    def _take(self) -> _Worker:
        """An idle worker, a new one while fewer than ``processes`` exist, else wait for one."""
        with self._cond:
            while not self._idle and len(self._workers) + self._starting >= self.processes:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._starting += 1
        try:
            worker = _Worker(self.sympy_timeout)
        finally:
            with self._cond:
                self._starting -= 1
                self._cond.notify()
        with self._cond:
            self._workers.append(worker)
        return worker

    def _give(self, worker: _Worker) -> None:
        with self._cond:
            if worker in self._workers:
                self._idle.append(worker)
                self._cond.notify()

    def _drop(self, worker: _Worker) -> None:
        worker.kill()
        with self._cond:
            if worker in self._workers:
                self._workers.remove(worker)
            self._cond.notify()

    def verify(self, gold: str, pred: str) -> bool:
        """Whether ``pred`` equals ``gold``; raises ``TimeoutError`` when the check was killed."""
        try:
            reply = self._ask(gold, pred)
        except TimeoutError:
            raise
        except (OSError, RuntimeError, ValueError) as exc:  # the worker died under the check
            logger.warning("the math-verify worker failed (%s); retrying the check on a new one", exc)
            reply = self._ask(gold, pred)
        return reply.get("result") is True

    def _ask(self, gold: str, pred: str) -> dict[str, Any]:
        worker = self._take()
        try:
            reply = worker.ask(gold, pred, self.timeout)
        except (OSError, RuntimeError, ValueError):
            self._drop(worker)
            raise
        if reply is None:
            self._drop(worker)
            raise TimeoutError(f"math-verify took longer than {self.timeout} s")
        self._give(worker)
        return reply

    def accuracy(self, answer: str, truth: str, inp: RewardInput) -> dict[str, float]:
        try:
            same = self.verify(truth, answer)
        except TimeoutError:
            return {"accuracy": 0.0, "timeout": 1.0}
        return {"accuracy": 1.0 if same else 0.0}

    def close(self) -> None:
        """Stop the worker processes (also done when the reward is garbage-collected or at exit); the
        next check starts a new one."""
        with self._cond:
            workers = list(self._workers)
            self._workers.clear()
            self._idle.clear()
            self._cond.notify_all()
        _kill_all(workers)
