"""``videorl.workers``: a call past its time limit costs its worker, never the caller.

The process pool's deadlines and crashes are tested in test_media_pool.py (its first user, ``cache
build``).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from videorl.api import LineWorkers, hookimpl
from videorl.rewards import RewardInput, RewardOutput
from videorl.workers import DeadlineThreads, WorkerPool

#: a helper that answers {"n": n} with {"twice": 2n}, and sleeps ``sleep`` seconds first
ECHO = (
    "import json, sys, time\n"
    "print(json.dumps({'ready': True}), flush=True)\n"
    "for line in sys.stdin:\n"
    "    request = json.loads(line)\n"
    "    time.sleep(request.get('sleep', 0))\n"
    "    print(json.dumps({'twice': 2 * request['n']}), flush=True)\n"
)


def test_run_each_marks_the_item_past_its_limit_and_the_rest_go_on() -> None:
    threads = DeadlineThreads(1)
    release = threading.Event()

    def work(x: float) -> float:
        if x < 0:
            release.wait(30)  # stuck until the test ends
        if x == 0:
            raise ValueError("zero")
        return x * 10

    start = time.monotonic()
    outcomes = asyncio.run(threads.run_each(work, [1.0, -1.0, 0.0, 2.0], timeout=0.3))
    release.set()
    assert time.monotonic() - start < 5
    assert [status for status, _ in outcomes] == ["ok", "timeout", "error", "ok"]
    assert outcomes[0][1] == 10.0 and outcomes[3][1] == 20.0 and str(outcomes[2][1]) == "zero"


def test_call_times_out_and_a_fresh_thread_takes_the_next_call() -> None:
    threads = DeadlineThreads(1)
    release = threading.Event()
    with pytest.raises(TimeoutError):
        asyncio.run(threads.call(lambda _: release.wait(30), None, 0.2))
    assert asyncio.run(threads.call(lambda x: x + 1, 41, 5.0)) == 42  # the stuck thread was replaced
    release.set()


def test_line_workers_kill_at_the_deadline_and_retry_once_after_a_death() -> None:
    pool = LineWorkers([sys.executable, "-c", ECHO], 1, name="echo worker")
    try:
        assert pool.ask({"n": 2}, 10.0) == {"twice": 4}
        (first,) = pool.workers
        start = time.monotonic()
        with pytest.raises(TimeoutError, match="the echo worker took longer than 0.5 s"):
            pool.ask({"n": 1, "sleep": 30}, 0.5)
        assert time.monotonic() - start < 3 and first.proc.poll() is not None and pool.workers == []
        assert pool.ask({"n": 3}, 10.0) == {"twice": 6}  # a new worker
        (second,) = pool.workers
        os.kill(second.proc.pid, signal.SIGKILL)
        second.proc.wait()
        assert pool.ask({"n": 5}, 10.0) == {"twice": 10}  # retried on a replacement
        assert pool.workers and pool.workers[0] is not second
    finally:
        pool.close()
    assert pool.workers == []


class LocalReward:
    """Defined in a test module, which worker processes cannot import."""

    def __call__(self, inp: RewardInput) -> RewardOutput:
        return RewardOutput(1.0)


def test_a_task_its_worker_cannot_import_is_that_tasks_failure_not_a_crash() -> None:
    with WorkerPool(1) as pool:
        (failed,) = pool.run(LocalReward(), [(None,)], timeout=30)
        (ok,) = pool.run(abs, [(-3,)], timeout=30)
    assert (failed.ok, failed.stage) == (False, "task") and failed.value.startswith("ModuleNotFoundError")
    assert (ok.ok, ok.value) == (True, 3)  # the same worker goes on


class LocalPlugin:
    @staticmethod
    @hookimpl
    def register_rewards(register: Any) -> None:
        register("local", LocalReward)


def test_reward_workers_name_a_reward_they_cannot_import(
    tmp_path: Path, fake_entry_points: Any, run_cli: Any
) -> None:
    fake_entry_points({"videorl-local": LocalPlugin})
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "a", "problem_type": "local", "answer": "1", "response": "r"}) + "\n")
    result = run_cli(
        "reward", "--input", str(rows), "--output", str(tmp_path / "out.jsonl"), "--workers", "2"
    )
    assert result.exit_code != 0 and "a worker process failed (ModuleNotFoundError" in result.stderr
    assert "cannot run in workers: use --workers 1" in result.stderr
    assert not (tmp_path / "out.jsonl").exists()
