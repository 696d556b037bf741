"""The one training loop (:func:`videorl.train.loop.run`) with a recording driver and a fake clock:
cadences, order, resume, on_step and the time metrics, in milliseconds."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from videorl.config import TrainConfig, load_config
from videorl.runs.checkpoint import CheckpointManager
from videorl.timing import StageTimer
from videorl.train.loop import RunIO, periodic_due, run


class Clock:
    """``time.perf_counter`` that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    fake = Clock()
    monkeypatch.setattr(time, "perf_counter", fake)
    yield fake


@dataclass
class Driver:
    """Each step: 1 s of rollout (timed by the loop's timer) and 0.25 s measured elsewhere; validation 3 s."""

    clock: Clock
    events: list[tuple[str, int]] = field(default_factory=list)
    has_validation: bool = True

    def step_once(self, step: int, timer: StageTimer) -> dict[str, float]:
        self.events.append(("step", step))
        with timer("rollout"):
            self.clock.now += 1.0
        timer.seconds["actor"] += 0.25  # e.g. a worker's own measurement
        return {"reward/overall": step / 10, "accuracy/overall": 0.5}

    def validate(self, step: int) -> dict[str, float]:
        self.events.append(("validate", step))
        self.clock.now += 3.0
        return {"val/accuracy/overall": 1.0}

    def save(self, step: int) -> None:
        self.events.append(("save", step))


@dataclass
class Evaluation:
    """Due on even steps; each pass takes 2 s."""

    clock: Clock
    events: list[tuple[str, int]]
    name: str = "benchmarks"

    def due(self, step: int, last_step: int) -> bool:
        return step % 2 == 0

    def __call__(self, step: int) -> dict[str, float]:
        self.events.append((self.name, step))
        self.clock.now += 2.0
        return {"bench/fixture/accuracy": 0.75}


class Metrics:
    def __init__(self) -> None:
        self.rows: list[tuple[int, dict[str, float]]] = []

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.rows.append((step, dict(metrics)))


class Progress:
    def __init__(self) -> None:
        self.updates: list[tuple[int, float | None, float]] = []
        self.stages: list[str] = []
        self.stage_times: list[dict[str, float]] = []

    def update(
        self,
        step: int,
        *,
        reward: float | None = None,
        stages: dict[str, float] | None = None,
        acc: float = 0.0,
    ) -> None:
        self.updates.append((step, reward, acc))
        self.stage_times.append(dict(stages or {}))

    def stage(self, text: str) -> None:
        self.stages.append(text)


def config(*overrides: str) -> TrainConfig:
    return load_config(None, ["model.path=/m", "data.train_files=[/d.jsonl]", *overrides])


def io(tmp_path: Path) -> tuple[RunIO, Metrics, Progress]:
    metrics, progress = Metrics(), Progress()
    return RunIO(CheckpointManager(tmp_path), metrics, progress), metrics, progress  # type: ignore[arg-type]


def test_validation_and_checkpoints_every_n_steps_and_at_the_last(tmp_path: Path, clock: Clock) -> None:
    driver = Driver(clock)
    run_io, metrics, _ = io(tmp_path)
    cfg = config("trainer.max_steps=5", "trainer.val_every=2", "trainer.save_every=3")
    assert run(cfg, driver, run_io, 0) == 5
    assert driver.events == [
        ("step", 1),
        ("step", 2), ("validate", 2),
        ("step", 3), ("save", 3),
        ("step", 4), ("validate", 4),
        ("step", 5), ("validate", 5), ("save", 5),
    ]  # fmt: skip
    assert [step for step, _ in metrics.rows] == [1, 2, 3, 4, 5]
    assert ["val/accuracy/overall" in row for _, row in metrics.rows] == [False, True, False, True, True]


def test_no_validation_when_val_every_is_0_or_the_driver_has_none(tmp_path: Path, clock: Clock) -> None:
    for cfg, has in ((config("trainer.max_steps=2", "trainer.val_every=0"), True),
                     (config("trainer.max_steps=2", "trainer.val_every=1"), False)):  # fmt: skip
        driver = Driver(clock, has_validation=has)
        run(cfg, driver, io(tmp_path)[0], 0)
        assert ("validate", 1) not in driver.events and ("validate", 2) not in driver.events
        assert driver.events[-1] == ("save", 2)  # save_every=0 still writes the last step


def test_a_resumed_run_continues_after_its_start_step(tmp_path: Path, clock: Clock) -> None:
    driver = Driver(clock)
    seen: list[int] = []
    cfg = config("trainer.max_steps=5", "trainer.val_every=0", "trainer.save_every=2")
    assert run(cfg, driver, io(tmp_path)[0], 3, on_step=lambda step, m: seen.append(step)) == 5
    assert driver.events == [("step", 4), ("save", 4), ("step", 5), ("save", 5)]
    assert seen == [4, 5]
    driver = Driver(clock)
    assert run(cfg, driver, io(tmp_path)[0], 5) == 5 and driver.events == []  # already done


def test_time_metrics_cover_the_stages_validation_and_evaluations(tmp_path: Path, clock: Clock) -> None:
    driver = Driver(clock)
    run_io, metrics, progress = io(tmp_path)
    rows: list[dict[str, float]] = []
    evaluation = Evaluation(clock, driver.events)
    cfg = config("trainer.max_steps=2", "trainer.val_every=2", "trainer.save_every=0")
    run(cfg, driver, run_io, 0, evaluations=[evaluation], on_step=lambda step, m: rows.append(m))
    first, second = rows
    assert first == {
        "reward/overall": 0.1,
        "accuracy/overall": 0.5,
        "time/rollout": 1.0,
        "time/actor": 0.25,
        "time/step": 1.0,  # the wall time: the worker-measured 0.25 s lies within it
    }
    assert second == {
        "reward/overall": 0.2,
        "accuracy/overall": 0.5,
        "val/accuracy/overall": 1.0,
        "bench/fixture/accuracy": 0.75,
        "time/rollout": 1.0,
        "time/actor": 0.25,
        "time/validation": 3.0,
        "time/benchmarks": 2.0,
        "time/step": 6.0,
    }
    # evaluations run after validation and before the step's checkpoint
    assert driver.events[-4:] == [("step", 2), ("validate", 2), ("benchmarks", 2), ("save", 2)]
    assert [row for _, row in metrics.rows] == rows  # what on_step sees is what is logged
    assert progress.updates == [(1, 0.1, 0.5), (2, 0.2, 0.5)]
    assert progress.stages == ["rollout", "rollout", "validation", "benchmarks"]
    # the progress line of a log shows the stage times of the step (not the step's own, shown apart)
    assert progress.stage_times[1] == {"rollout": 1.0, "actor": 0.25, "validation": 3.0, "benchmarks": 2.0}


def test_evaluation_names_must_not_collide(tmp_path: Path, clock: Clock) -> None:
    events: list[Any] = []
    for names in (["bench", "bench"], ["validation"], ["step"]):
        with pytest.raises(ValueError, match="evaluation names must be distinct"):
            run(config(), Driver(clock), io(tmp_path)[0], 0,
                evaluations=[Evaluation(clock, events, n) for n in names])  # fmt: skip
    assert events == []


def test_periodic_due() -> None:
    assert [s for s in range(1, 8) if periodic_due(s, 3, 7)] == [3, 6, 7]
    assert not any(periodic_due(s, 0, 7) for s in range(1, 8))
    # checkpoints and benchmark passes: every=0 still saves and scores the last step
    assert [s for s in range(1, 11) if periodic_due(s, 4, 10, at_last=True)] == [4, 8, 10]
    assert [s for s in range(1, 11) if periodic_due(s, 0, 10, at_last=True)] == [10]
