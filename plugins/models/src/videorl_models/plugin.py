"""Hook implementations of videorl-models. Targets are lazy: nothing heavy is imported here."""

from __future__ import annotations

from videorl.api import Register, hookimpl


@hookimpl
def register_model_backends(register: Register) -> None:
    pass  # filled by the Qwen backends (issue: model backends)
