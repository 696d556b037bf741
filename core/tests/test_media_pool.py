"""The build's process pool: a slow task is killed at its deadline, a crash costs only its task."""

from __future__ import annotations

import os
import time

from videorl.workers import WorkerPool


def test_timeouts_and_crashes_fail_one_task_each() -> None:
    tasks = [(0.0,), (30.0,), (0.0,), (0.0,)]
    started = time.monotonic()
    with WorkerPool(2) as pool:
        results = {r.index: r for r in pool.run(time.sleep, tasks, timeout=3.0)}
        assert time.monotonic() - started < 20
        assert [results[i].ok for i in range(4)] == [True, False, True, True]
        assert results[1].stage == "timeout" and results[1].value == "timed out after 3 s"
        # the pool replaced the killed worker and still runs tasks; a worker that dies is reported
        crashed = {r.index: r for r in pool.run(os._exit, [(3,), (0,)], timeout=30)}
        assert {r.stage for r in crashed.values()} == {"crash"}
        assert "exit code 3" in crashed[0].value
        after = list(pool.run(abs, [(-2,)], timeout=30))
        assert [(r.ok, r.value) for r in after] == [(True, 2)]


def test_a_raising_task_reports_its_error() -> None:
    with WorkerPool(1) as pool:
        (result,) = pool.run(int, [("twelve",)], timeout=30)
    assert not result.ok and result.stage == "task" and result.value.startswith("ValueError: invalid literal")
