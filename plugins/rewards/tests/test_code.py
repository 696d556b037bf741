"""Golden cases of the code reward: programs run against tests in the sandbox, attacks included."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from videorl.api import DataError, RewardInput
from videorl.testing import assert_reward_contract
from videorl_rewards.python_code import CodeReward, extract_code
from videorl_rewards.sandbox import Limits, run_python

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
        case("import os\nos.fork()\ndef add(a, b):\n    return a + b", 0.1),
        case(
            "import socket\nsocket.create_connection(('127.0.0.1', 9))\ndef add(a, b):\n    return a + b", 0.1
        ),
        case(f"open({str(outside)!r}, 'w').write('x')\ndef add(a, b):\n    return a + b", 0.1),
        case("open('scratch.txt', 'w').write('3')\ndef add(a, b):\n    return a + b", 1.0),  # its own tmp dir
        case("x = bytearray(2**31)\ndef add(a, b):\n    return a + b", 0.1),  # over the memory limit
        case("import subprocess\ndef add(a, b):\n    return a + b", 0.1),
        case(
            "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef add(a, b):\n    return a + b", 0.1
        ),
        case("import ctypes\ndef add(a, b):\n    return a + b", 0.1),
        case("def add(a, b):\n    return a + b", 1.0, fenced=False),
        case("print(int(input()) * 2)", 1.0, tests=IO_TESTS),
        case("print(int(input()) + 2)", 0.1, tests=IO_TESTS),  # 5 and 7, not 6 and 10
        case("while True:\n    print('x' * 10000)", 0.1, tests=IO_TESTS),  # output flood
        case("import sys\nprint(int(input()) * 2)\nsys.exit(0)", 1.0, tests=IO_TESTS),
    ]
    assert_reward_contract(reward, cases)
    assert not outside.exists()


def test_each_attack_is_refused_for_the_right_reason() -> None:
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
        test = f"try:\n    exec({code!r})\n    raise SystemExit('allowed')\nexcept (PermissionError, ImportError):\n    pass"
        run = run_python("", [test], mode="assert", limits=limits)
        assert run.reports[0]["ok"] is True, f"{name} was not refused"
    assert not os.path.exists("/etc/videorl-sandbox-test")


def test_infinite_loop_costs_only_its_time_limit() -> None:
    start = time.monotonic()
    run = run_python("while True: pass", ["assert True"], mode="assert", limits=Limits(seconds=0.5))
    assert run.timed_out and run.reports == {}
    assert time.monotonic() - start < 2.0


def test_writes_stay_in_a_temporary_directory_that_is_removed() -> None:
    run = run_python("import os\nprint(os.getcwd())", [""], mode="io", limits=Limits())
    workdir = Path(run.reports[0]["output"].strip())
    assert workdir.name.startswith("videorl-code-") and not workdir.exists()


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
