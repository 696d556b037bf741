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
