"""Every test of the workspace, and every process it starts, runs with a fresh, empty home directory.

Nothing a developer's machine has from earlier runs (``~/.ray/auth_token``, ``~/.cache``,
``~/.config/pip``) can make a test pass that fails on a new machine. The session gets an empty home
before any test module is imported (libraries that read it at import see that one), and each test
gets one of its own. pip reads no configuration and no index: a test that installs a package builds
it locally (``--no-deps --no-build-isolation``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

# Variables that would reach the developer's own caches, cluster or package index.
DROPPED = (
    "RAY_ADDRESS",
    "RAY_AUTH_MODE",
    "RAY_AUTH_TOKEN",
    "RAY_AUTH_TOKEN_PATH",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_FIND_LINKS",
    "HF_HUB_CACHE",
    "TRANSFORMERS_CACHE",
    "TORCH_HOME",
)


def home_environment(home: Path) -> dict[str, str]:
    """The variables that point every tool at ``home`` (which this creates) instead of the user's."""
    home.mkdir(parents=True, exist_ok=True)
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "HF_HOME": str(home / ".cache" / "huggingface"),
        "PIP_CONFIG_FILE": os.devnull,  # pip reads no configuration file at all
        "PIP_NO_INDEX": "1",
    }


def pytest_configure(config: pytest.Config) -> None:
    for name in DROPPED:
        os.environ.pop(name, None)
    home = Path(tempfile.mkdtemp(prefix="videorl-test-home-"))
    config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))
    os.environ.update(home_environment(home))


@pytest.fixture(autouse=True)
def fresh_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own empty home directory (also that of the processes it starts)."""
    home = tmp_path_factory.mktemp("home")
    for name, value in home_environment(home).items():
        monkeypatch.setenv(name, value)
    return home


#: Under pytest-xdist (``make test`` runs two workers) each module is one unit of work, run on one
#: worker (its module fixtures, such as a trained run or a started engine, are built once), except:
#: modules that share a unit with others, by name, and modules whose tests are units of their own.
XDIST_SHARED_UNITS = {
    # the escape tests count the sandbox user's processes: no other test runs the sandbox meanwhile
    "plugins/rewards/tests/test_sandbox_escapes.py": "code sandbox",
    "plugins/rewards/tests/test_code.py": "code sandbox",
    "plugins/rewards/tests/test_plugin.py": "code sandbox",  # its code row
    "tests/test_benchmarks_run.py::test_the_benchmark_prints_its_json_line_at_a_tiny_size[rewards.py]": (
        "code sandbox"
    ),
}
XDIST_SPLIT_MODULES = {"tests/test_benchmarks_run.py"}  # one script per test, no module fixture


def xdist_unit(nodeid: str) -> str:
    """The unit of work of the test ``nodeid`` under pytest-xdist (see :data:`XDIST_SHARED_UNITS`)."""
    module = nodeid.split("::", 1)[0]
    shared = XDIST_SHARED_UNITS.get(nodeid) or XDIST_SHARED_UNITS.get(module)
    if shared:
        return shared
    return nodeid if module in XDIST_SPLIT_MODULES else module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's scope scheduling, with :func:`xdist_unit` as the scope (its ``loadgroup``, which
    reads ``xdist_group`` marks, does not work with pytest 9: it renames nodes through a private
    attribute that pytest 9 no longer reads)."""
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_unit(nodeid)

    return UnitScheduling(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the units with the most slow tests come first (``make test`` passes
    ``--no-loadscope-reorder``), so that the long ones start early instead of leaving one worker alone
    at the end. A plain ``pytest`` keeps the usual order."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(xdist_unit(item.nodeid), []).append(item)
    order = sorted(units.values(), key=lambda u: -sum(i.get_closest_marker("slow") is not None for i in u))
    items[:] = [item for unit in order for item in unit]
