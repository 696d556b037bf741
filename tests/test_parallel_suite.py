"""`make test` runs the suite on two pytest-xdist processes, and the tests of one ``xdist_group`` (those
that start a Ray runtime: ``ray``) on one of them; a pytest or xdist upgrade that loses the groups fails
here (pytest 9 did, silently: conftest.py restores them)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TESTS = """
import pytest

@pytest.mark.xdist_group("ray")
@pytest.mark.parametrize("i", range(6))
def test_grouped(i):
    pass

@pytest.mark.parametrize("i", range(6))
def test_free(i):
    pass
"""


def test_a_group_runs_on_one_worker_and_the_rest_on_both(tmp_path: Path) -> None:
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_groups.py").write_text(TESTS)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-v",
            "-p",
            "no:cacheprovider",
            "test_groups.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    ran = re.findall(r"\[(gw\d)\] \[ *\d+%\] PASSED test_groups.py::(test_\w+)\[\d\](@ray)?", done.stdout)
    assert len(ran) == 12, done.stdout[-3000:]
    grouped = {worker for worker, name, suffix in ran if name == "test_grouped"}
    assert len(grouped) == 1 and all(suffix == "@ray" for _, name, suffix in ran if name == "test_grouped")
    assert all(suffix == "" for _, name, suffix in ran if name == "test_free")
