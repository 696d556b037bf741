"""Third-party plugins end to end: install into a throwaway location, see them discovered and tested.

Each package is installed with ``pip install --target`` into a temporary directory put on
PYTHONPATH of a subprocess, so the test environment itself is never modified.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTRIB = ROOT / "contrib"


def _pip_install_target(package: Path, target: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", str(target), str(package)],
        check=True,
        capture_output=True,
    )


def _env_with(target: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), env.get("PYTHONPATH", "")]))
    env.pop("VIDEORL_DISABLE_PLUGINS", None)
    return env


def _plugins_json(env: dict[str, str] | None = None) -> dict[str, dict]:
    out = subprocess.run(
        [sys.executable, "-m", "videorl.cli", "plugins", "--json"],
        capture_output=True, text=True, check=True, env=env,
    ).stdout
    return {p["name"]: p for p in json.loads(out)}


@pytest.mark.slow
def test_contrib_example_is_not_installed_by_default_and_is_discovered_once_installed(tmp_path: Path) -> None:
    assert "videorl-reward-counting" not in _plugins_json()
    target = tmp_path / "site"
    _pip_install_target(CONTRIB / "videorl-reward-counting", target)
    env = _env_with(target)
    entry = _plugins_json(env)["videorl-reward-counting"]
    assert entry["status"] == "ok" and entry["version"] == "0.1.0"
    assert entry["components"] == {"rewards": ["counting"]}
    assert entry["hooks"] == ["register_rewards"]
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "videorl.testing", "-o", "addopts=",
         str(CONTRIB / "videorl-reward-counting" / "tests")],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "name"), [("rewards", "shot count"), ("benchmarks", "toy bench")])
def test_plugin_template_renders_installs_and_passes_its_own_tests(tmp_path: Path, kind: str, name: str) -> None:
    from cookiecutter.main import cookiecutter

    out = Path(
        cookiecutter(
            str(CONTRIB / "plugin-template"),
            no_input=True,
            output_dir=str(tmp_path),
            extra_context={"plugin_name": name, "kind": kind},
        )
    )
    hyphenated = name.replace(" ", "-")
    underscored = name.replace(" ", "_")
    assert out.name == f"videorl-{hyphenated}"
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    module = "reward.py" if kind == "rewards" else "benchmark.py"
    assert files == sorted(
        [
            "README.md",
            "pyproject.toml",
            f"src/videorl_{underscored}/__init__.py",
            f"src/videorl_{underscored}/plugin.py",
            f"src/videorl_{underscored}/{module}",
            "tests/test_plugin.py",
        ]
    )
    target = tmp_path / "site"
    _pip_install_target(out, target)
    env = _env_with(target)
    entry = _plugins_json(env)[f"videorl-{hyphenated}"]
    assert entry["status"] == "ok" and entry["components"] == {kind: [underscored]}
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-o", "addopts=-p videorl.testing", str(out / "tests")],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
