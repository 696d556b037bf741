"""Hook implementations of videorl-rewards. Targets are lazy: nothing heavy is imported here."""

from __future__ import annotations

from videorl.api import Register, hookimpl


@hookimpl
def register_rewards(register: Register) -> None:
    pass  # filled by the reward library (issue: task-aware reward library)
