"""The order of the actor's half of a step (:func:`videorl.actor.step.train_step`): the engine sleeps
before the first-step parity check, whose forward then does not share the GPU with the engine's
weights and KV cache; the check reads only the log-probs the engine already returned."""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Any

import pytest

from videorl.actor import step as actor_step
from videorl.generation import EngineCapabilities
from videorl.parallel import Parallel
from videorl.timing import StageTimer


class _Engine:
    capabilities = EngineCapabilities(can_sleep=True)  # an engine that frees its memory for the update

    def __init__(self, calls: list[str]) -> None:
        self.calls, self.asleep = calls, False

    def sleep(self) -> None:
        self.calls.append("sleep")
        self.asleep = True

    def update_weights(self, state: Any) -> None:
        self.calls.append("update_weights")
        self.asleep = False


def test_the_parity_check_runs_with_the_engine_asleep(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    engine = _Engine(calls)

    def parity(config: Any, actor: Any, episodes: Any, dist: Any) -> dict[str, float]:
        calls.append(f"parity(asleep={engine.asleep})")
        return {"parity/logprob_diff/video": 0.01}

    monkeypatch.setattr(actor_step, "first_step_check", parity)
    monkeypatch.setattr(actor_step, "set_learning_rate", lambda *a: calls.append("lr"))

    def update(*args: Any) -> dict[str, float]:
        calls.append("update")
        return {"actor/loss": 1.0}

    monkeypatch.setattr(actor_step, "update", update)
    monkeypatch.setattr(actor_step, "refresh_engine", lambda actor, engine: engine.update_weights({}))
    metrics = actor_step.train_step(
        SimpleNamespace(),  # type: ignore[arg-type]
        SimpleNamespace(optimizer=None),  # type: ignore[arg-type]
        SimpleNamespace(),  # type: ignore[arg-type]
        [],
        Parallel(),
        StageTimer(),
        step=1,
        engine=engine,  # type: ignore[arg-type]
        parity_check=True,
    )
    assert calls == ["sleep", "parity(asleep=True)", "lr", "update", "update_weights"]
    assert metrics == {"actor/loss": 1.0, "parity/logprob_diff/video": 0.01}
    # the check is given no engine: it compares the engine's returned log-probs with the actor's
    assert "engine" not in inspect.signature(actor_step.first_step_check).parameters
