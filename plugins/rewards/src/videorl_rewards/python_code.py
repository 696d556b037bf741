"""Code: the answer's Python program is run against the sample's tests in a sandbox (see ``sandbox``)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from videorl.api import ConfigError, DataError, RewardInput, TaskReward
from videorl_rewards.sandbox import Limits, isolation, run_python

logger = logging.getLogger("videorl.rewards")

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_code(text: str) -> str:
    """The last fenced code block of ``text`` (```` ```python ... ``` ````), else the whole text."""
    blocks = _FENCE.findall(text)
    return (blocks[-1] if blocks else text).strip("\n")


def _same_output(got: str, expected: str) -> bool:
    def norm(text: str) -> list[str]:
        return [line.rstrip() for line in text.rstrip().splitlines()]

    return norm(got) == norm(expected)


class CodeReward(TaskReward):
    """Accuracy = the fraction of the sample's tests the program passes.

    Tests come from the sample's ``tests`` field (or a ground truth ``{"tests": [...]}``): a list of
    Python statements run after the program (``"assert add(2, 3) == 5"``), or a list of
    ``{"input": ..., "output": ...}`` pairs, where the program reads ``input`` on stdin and its stdout
    must equal ``output`` (trailing whitespace aside). A sample without tests is a ``DataError``.

    The program runs in the sandbox of :mod:`videorl_rewards.sandbox`: namespaces, seccomp and rlimits
    that the kernel enforces (bubblewrap), with ``timeout`` seconds of wall-clock time (default 5,
    counted once the sandboxed interpreter is up), ``memory_mb`` of address space per process (512),
    ``disk_mb`` of private tmpfs (64), ``processes`` processes and threads (32) and ``max_output``
    characters of output per test; tests finished before a timeout still count. Where the machine
    cannot isolate (no bubblewrap, no user namespaces) creating the reward fails, unless
    ``unsafe_no_isolation`` is true: then programs run with rlimits and an audit hook only, which a
    hostile program can defeat (docs/security.md). Assert tests run in the program's own interpreter,
    so a deliberately adversarial program could fake them; input/output tests are compared outside
    it. An answer that does not compile, or is longer than ``max_chars``, does not fit the type.
    """

    name = "code"

    def __init__(
        self,
        *,
        timeout: float = 5.0,
        memory_mb: int = 512,
        max_output: int = 1_000_000,
        max_chars: int = 100_000,
        disk_mb: int = 64,
        processes: int = 32,
        unsafe_no_isolation: bool = False,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ConfigError(f"code: timeout must be a positive number of seconds, got {timeout!r}")
        for label, value in (("memory_mb", memory_mb), ("disk_mb", disk_mb), ("processes", processes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"code: {label} must be a positive integer, got {value!r}")
        if not isinstance(unsafe_no_isolation, bool):
            raise ConfigError(f"code: unsafe_no_isolation must be true or false, got {unsafe_no_isolation!r}")
        self.limits = Limits(
            seconds=float(timeout),
            memory_mb=memory_mb,
            output_chars=int(max_output),
            disk_mb=disk_mb,
            processes=processes,
        )
        self.max_chars = int(max_chars)
        status = isolation()
        self.isolated = status.available
        if not status.available:
            if not unsafe_no_isolation:
                raise ConfigError(
                    f"code: this machine cannot isolate the programs the code reward runs ({status.reason}). "
                    "Install bubblewrap (apt-get install bubblewrap) and allow user namespaces "
                    "(sysctl user.max_user_namespaces > 0, kernel.unprivileged_userns_clone=1 where it "
                    "exists), or, only where a policy's programs may read and write everything this user "
                    "can, set rewards.options.code.unsafe_no_isolation: true. See docs/security.md."
                )
            logger.warning(
                "UNSAFE: the code reward runs policy-written programs WITHOUT isolation "
                "(rewards.options.code.unsafe_no_isolation is true; %s): they can read, change and delete "
                "whatever this user can and signal its processes. See docs/security.md.",
                status.reason,
            )

    def parse_answer(self, text: Any, inp: RewardInput) -> str | None:
        code = extract_code(str(text))
        if not code.strip() or len(code) > self.max_chars:
            return None
        try:
            compile(code, "<answer>", "exec")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        return code

    def parse_truth(self, inp: RewardInput) -> tuple[str, list[Any]]:
        tests = inp.extra.get("tests")
        if tests is None and isinstance(inp.ground_truth, Mapping):
            tests = inp.ground_truth.get("tests")
        if not isinstance(tests, list) or not tests:
            raise DataError(
                f"sample {inp.sample_id!r} ({inp.problem_type}) has no tests: give a 'tests' field with a "
                'list of assert statements or of {"input": ..., "output": ...} pairs'
            )
        if all(isinstance(t, str) for t in tests):
            return "assert", tests
        if all(isinstance(t, Mapping) and isinstance(t.get("input"), str) and "output" in t for t in tests):
            return "io", tests
        raise DataError(
            f"sample {inp.sample_id!r}: tests must all be assert statements (strings) or all "
            '{"input": str, "output": str} pairs'
        )

    def accuracy(self, answer: str, truth: tuple[str, list[Any]], inp: RewardInput) -> dict[str, float]:
        mode, tests = truth
        inputs = tests if mode == "assert" else [t["input"] for t in tests]
        run = run_python(answer, inputs, mode=mode, limits=self.limits, isolated=self.isolated)
        passed = 0
        for i, test in enumerate(tests):
            report = run.reports.get(i, {})
            if mode == "assert":
                passed += report.get("ok") is True
            else:
                passed += isinstance(report.get("output"), str) and _same_output(
                    report["output"], str(test["output"])
                )
        parts = {"accuracy": passed / len(tests)}
        if run.timed_out:
            parts["timeout"] = 1.0
        if run.over_output:
            parts["output_limit"] = 1.0
        return parts
