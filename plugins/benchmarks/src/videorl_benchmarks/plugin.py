"""Hook implementations of videorl-benchmarks. Targets are lazy: nothing heavy is imported here."""

from __future__ import annotations

from videorl.api import Register, hookimpl


@hookimpl
def register_benchmarks(register: Register) -> None:
    pass  # filled by the benchmark adapters (issue: multi-benchmark evaluation)
