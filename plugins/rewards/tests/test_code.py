"""Golden cases of the code reward: programs run against tests in the sandbox, attacks included."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from videorl.api import ConfigError, DataError, RewardInput
from videorl.testing import assert_reward_contract
from videorl_rewards import sandbox
from videorl_rewards.python_code import CodeReward, extract_code
from videorl_rewards.sandbox import Limits, isolation, run_python

pytestmark = pytest.mark.skipif(
    not isolation().available,
    reason=(
        f"no isolated sandbox on this machine ({isolation().reason}); test_sandbox_escapes checks the refusal"
    ),
)

TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 4", "assert add(0, 0) == 0"]
IO_TESTS = [{"input": "3\n", "output": "6\n"}, {"input": "5", "output": "10"}]


def case(code: str, expected: float, tests: Any = TESTS, fenced: bool = True) -> tuple[RewardInput, float]:
    body = f"```python\n{code}\n```" if fenced else code
    return RewardInput(
        f"<answer>{body}</answer>", "code", "", sample_id="c", extra={"tests": tests}
    ), expected


@pytest.fixture(scope="module")
def reward() -> CodeReward:
    return CodeReward(timeout=1.0)


@pytest.mark.slow
def test_golden_cases(reward: CodeReward, tmp_path_factory: pytest.TempPathFactory) -> None:
    outside = tmp_path_factory.mktemp("outside") / "written.txt"
    cases = [
        case("def add(a, b):\n    return a + b", 1.0),
        case("def add(a, b):\n    return a - b", 0.9 * 0.25 + 0.1),  # only add(0, 0) passes
        case("def add(a, b) return", 0.05),  # does not compile
        case("while True:\n    pass", 0.1),  # killed at the time limit
        case(
            "def add(a, b):\n    while a == 2:\n        pass\n    return a + b", 0.9 * 0.5 + 0.1
        ),  # 2 before the hang
        # processes are the sandbox's own business: they live in its PID namespace and die with it
        case("import os\nif os.fork() == 0:\n    os._exit(0)\ndef add(a, b):\n    return a + b", 1.0),
        case(
            "import socket\nsocket.create_connection(('127.0.0.1', 9))\ndef add(a, b):\n    return a + b", 0.1
        ),
        case(f"open({str(outside)!r}, 'w').write('x')\ndef add(a, b):\n    return a + b", 0.1),
        case("open('scratch.txt', 'w').write('3')\ndef add(a, b):\n    return a + b", 1.0),  # its own tmp dir
        case("x = bytearray(2**31)\ndef add(a, b):\n    return a + b", 0.1),  # over the memory limit
        case(
            "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef add(a, b):\n    return a + b", 1.0
        ),  # its parent is the namespace's init, which the kernel shields from the namespace's signals
        case("def add(a, b):\n    return a + b", 1.0, fenced=False),
        case("print(int(input()) * 2)", 1.0, tests=IO_TESTS),
        case("print(int(input()) + 2)", 0.1, tests=IO_TESTS),  # 5 and 7, not 6 and 10
        case("while True:\n    print('x' * 10000)", 0.1, tests=IO_TESTS),  # output flood
        case("import sys\nprint(int(input()) * 2)\nsys.exit(0)", 1.0, tests=IO_TESTS),
    ]
    assert_reward_contract(reward, cases)
    assert not outside.exists()


def test_unisolated_fallback_keeps_the_audit_hook() -> None:
    """``isolated=False`` (the opt-in fallback) still refuses the obvious attacks in the interpreter."""
    limits = Limits(seconds=2.0)
    probes = {
        "fork": "import os\nos.fork()",
        "socket": "import socket\nsocket.socket()",
        "write": "open('/etc/videorl-sandbox-test', 'w')",
        "kill": "import os\nos.kill(os.getpid(), 0)",
        "rlimit": "import resource\nresource.setrlimit(resource.RLIMIT_CPU, (100, 100))",
        "posixsubprocess": "import _posixsubprocess",
    }
    for name, code in probes.items():
        test = (
            f"try:\n    exec({code!r})\n    raise SystemExit('allowed')\nexcept (PermissionError, "
            "ImportError):\n    pass"
        )
        run = run_python("", [test], mode="assert", limits=limits, isolated=False)
        assert run.reports[0]["ok"] is True, f"{name} was not refused"
    assert not os.path.exists("/etc/videorl-sandbox-test")


def test_infinite_loop_costs_only_its_time_limit() -> None:
    start = time.monotonic()
    run = run_python("while True: pass", ["assert True"], mode="assert", limits=Limits(seconds=0.5))
    assert run.timed_out and run.reports == {}
    assert time.monotonic() - start < 2.0


def test_the_program_sees_only_its_private_tmpfs() -> None:
    code = "import os\nprint(os.getcwd(), os.getuid(), sorted(os.listdir('/tmp')), os.environ.get('HOME'))"
    run = run_python(code, [""], mode="io", limits=Limits())
    assert run.reports[0]["output"].split() == [
        sandbox.WORKDIR,
        str(sandbox.SANDBOX_UID),
        "['shm',",  # where /dev/shm points
        "'videorl-code']",
        sandbox.WORKDIR,
    ]


@pytest.fixture
def no_bwrap(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This machine as one without bubblewrap: the probe runs again and finds no isolation."""
    real_which = sandbox.shutil.which
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    isolation.cache_clear()
    yield
    isolation.cache_clear()


@pytest.mark.usefixtures("no_bwrap")
def test_without_isolation_the_reward_refuses_unless_told_loudly(caplog: pytest.LogCaptureFixture) -> None:
    assert isolation().level == "none" and "bwrap" in isolation().reason
    with pytest.raises(ConfigError, match=r"cannot isolate.*bubblewrap.*unsafe_no_isolation: true"):
        CodeReward()
    with pytest.raises(ConfigError, match="unsafe_no_isolation must be true or false"):
        not_a_bool: Any = "yes"  # as a YAML config could give it
        CodeReward(unsafe_no_isolation=not_a_bool)
    with caplog.at_level(logging.WARNING, logger="videorl.rewards"):
        reward = CodeReward(unsafe_no_isolation=True, timeout=2.0)
    assert "UNSAFE" in caplog.text and not reward.isolated
    out = reward(case("import os\nos.fork()\ndef add(a, b):\n    return a + b", 0)[0])
    assert out is not None and out.score == pytest.approx(0.1)  # the fallback's audit hook refused the fork
    out = reward(case("def add(a, b):\n    return a + b", 0)[0])
    assert out is not None and out.score == 1.0


def test_samples_without_tests(reward: CodeReward) -> None:
    with pytest.raises(DataError, match="has no tests"):
        reward(RewardInput("<answer>print(1)</answer>", "code", "print(1)", sample_id="c9"))
    with pytest.raises(DataError, match="all be assert statements"):
        reward(case("print(1)", 0, tests=["assert True", {"input": "", "output": ""}])[0])
    out = reward(
        RewardInput("<answer>def f():\n    return 2</answer>", "code", {"tests": ["assert f() == 2"]})
    )
    assert out is not None and out.score == 1.0


def test_extract_code() -> None:
    assert extract_code("text ```python\na = 1\n``` and ```\nb = 2\n```") == "b = 2"
    assert extract_code("a = 1") == "a = 1"


def test_a_code_row_with_tests_needs_no_answer(run_cli: Any, tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    program = "def add(a, b):\n    return a + b"
    rows.write_text(
        json.dumps(
            {"id": "c1", "problem": "add", "problem_type": "code", "tests": TESTS[:2], "response": program}
        )
        + "\n"
        + json.dumps({"id": "m1", "problem": "2+2?", "problem_type": "math", "response": "4"})
        + "\n"
    )
    out = tmp_path / "out.jsonl"
    result = run_cli("reward", "--input", str(rows), "--output", str(out))
    assert "rows.jsonl:2: missing field ground_truth or answer or solution" in result.stderr + result.output
    (scored,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert scored["id"] == "c1" and scored["scores"] == [pytest.approx(0.9)]  # untagged: no format credit


def test_a_scorer_with_lower_hard_limits_still_runs_programs() -> None:
    """rlimits are only ever lowered: a hard limit under the sandbox's own (100 open files) is kept."""
    script = (
        "from videorl_rewards.sandbox import Limits, run_python\n"
        "code = 'import resource\\nprint(resource.getrlimit(resource.RLIMIT_NOFILE)[1])'\n"
        "print(run_python(code, [''], mode='io', limits=Limits()).reports[0]['output'], end='')"
    )
    done = subprocess.run(
        ["prlimit", "--nofile=100:100", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout == "100\n", done.stderr


def test_a_sandbox_that_cannot_start_says_why() -> None:
    # the limits hold from the first process of the run on: it cannot even load its libraries
    with pytest.raises(sandbox.SandboxUnavailable, match=r"(?s)did not start.*(failed to map|MemoryError)"):
        run_python("print(1)", [""], mode="io", limits=Limits(memory_mb=1))
