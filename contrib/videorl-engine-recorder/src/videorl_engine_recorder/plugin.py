"""Hook implementation of videorl-engine-recorder: the ``recorder`` rollout engine."""

from __future__ import annotations

from videorl.api import Register, hookimpl


@hookimpl
def register_rollout_engines(register: Register) -> None:
    # a lazy target: the engine's module is imported when a run asks for the engine, not on listing
    register(
        "recorder",
        "videorl_engine_recorder.engine:RecorderEngine",
        description="the hf engine, each generate call recorded (engine option log)",
    )
