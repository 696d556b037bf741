"""Every test of the workspace, and every process it starts, runs with a fresh, empty home directory;
and the groups of tests that ``make test`` runs on one pytest-xdist process each
(:func:`pytest_collection_modifyitems`).

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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` (``make test``), a test marked ``xdist_group(NAME)`` runs on the same
    xdist process as the others of NAME: tests that start a Ray runtime are in ``ray``, so that two never
    start at once on a 2-core machine. pytest-xdist 3.8 names the group in the node id (``...@ray``)
    through ``item._nodeid``, which pytest 9 no longer reads (the id is ``item._id``): the groups were
    silently lost. Until xdist follows, the suffix is set here (tests/test_parallel_suite.py checks it)."""
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import coerce_node_id

    for item in items:
        marks = item.iter_markers("xdist_group")
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks})
        if names and "@" not in item.nodeid:
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(names)}")
