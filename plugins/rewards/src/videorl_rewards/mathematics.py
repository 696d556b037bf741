"""Math: symbolic equivalence of the answer and the ground truth via ``math-verify``, in worker
processes that are killed when an answer makes sympy hang."""

from __future__ import annotations

import os
import sys
from typing import Any

from videorl.api import ConfigError, LineWorker, LineWorkers, RewardInput, TaskReward, answers


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
        argv = [sys.executable, "-m", "videorl_rewards._math_worker", str(self.sympy_timeout)]
        self._pool = LineWorkers(argv, processes, name="math-verify worker")

    def parse_answer(self, text: Any, inp: RewardInput) -> str | None:
        text = answers.strip_math_delimiters(str(text))
        return text if text and len(text) <= self.max_chars else None

    @property
    def _workers(self) -> list[LineWorker]:
        """The live worker processes (idle or busy)."""
        return self._pool.workers

    def verify(self, gold: str, pred: str) -> bool:
        """Whether ``pred`` equals ``gold``; raises ``TimeoutError`` when the check was killed."""
        return self._pool.ask({"gold": gold, "pred": pred}, self.timeout).get("result") is True

    def accuracy(self, answer: str, truth: str, inp: RewardInput) -> dict[str, float]:
        try:
            same = self.verify(truth, answer)
        except TimeoutError:
            return {"accuracy": 0.0, "timeout": 1.0}
        return {"accuracy": 1.0 if same else 0.0}

    def close(self) -> None:
        """Stop the worker processes (also done when the reward is garbage-collected or at exit); the
        next check starts a new one."""
        self._pool.close()
