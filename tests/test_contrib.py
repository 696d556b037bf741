"""Third-party plugins end to end: install into a throwaway location, see them discovered and tested.

Each package is installed with ``pip install --target`` into a temporary directory put on
PYTHONPATH of a subprocess, so the test environment itself is never modified.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTRIB = ROOT / "contrib"


def _litter() -> list[str]:
    """What builds and test runs leave in contrib/: build/, *.egg-info, __pycache__, .pytest_cache."""
    names = {"build", "__pycache__", ".pytest_cache"}
    return sorted(
        str(p) for p in CONTRIB.rglob("*") if p.is_dir() and (p.name in names or p.suffix == ".egg-info")
    )


@pytest.fixture(autouse=True)
def _leaves_the_checkout_clean() -> Iterator[None]:
    before = _litter()
    yield
    assert _litter() == before, "this test wrote into contrib/"


def _pip_install_target(package: Path, target: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(package),
        ],
        check=True,
        capture_output=True,
    )


def _env_with(target: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")  # running the contrib tests writes nothing there
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), env.get("PYTHONPATH", "")]))
    env.pop("VIDEORL_DISABLE_PLUGINS", None)
    return env


def _plugins_json(env: dict[str, str] | None = None) -> dict[str, dict]:
    out = subprocess.run(
        [sys.executable, "-m", "videorl.cli", "plugins", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
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
    assert entry["components"] == {
        "prompt_templates": ["counting", "counting/thinking"],
        "rewards": ["counting"],
    }
    assert entry["hooks"] == ["register_prompt_templates", "register_rewards"]
    tests = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "videorl.testing",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            str(CONTRIB / "videorl-reward-counting" / "tests"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "name"), [("rewards", "shot count"), ("benchmarks", "toy bench")])
def test_plugin_template_renders_installs_and_passes_its_own_tests(
    tmp_path: Path, kind: str, name: str
) -> None:
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
            *(
                [
                    f"src/videorl_{underscored}/templates/{underscored}.jinja",
                    f"src/videorl_{underscored}/templates/{underscored}.thinking.jinja",
                ]
                if kind == "rewards"
                else []
            ),
        ]
    )
    target = tmp_path / "site"
    _pip_install_target(out, target)
    env = _env_with(target)
    entry = _plugins_json(env)[f"videorl-{hyphenated}"]
    templates = {"prompt_templates": [underscored, f"{underscored}/thinking"]} if kind == "rewards" else {}
    assert entry["status"] == "ok" and entry["components"] == {kind: [underscored], **templates}
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-o", "addopts=-p videorl.testing", str(out / "tests")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr


@pytest.mark.slow
def test_llava_onevision_backend_installs_is_listed_and_passes_its_own_tests(tmp_path: Path) -> None:
    assert "videorl-models-llava-onevision" not in _plugins_json()
    # installed from a copy, so that the build leaves nothing in the checkout
    package = tmp_path / "videorl-models-llava-onevision"
    shutil.copytree(
        CONTRIB / package.name, package, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    target = tmp_path / "site"
    _pip_install_target(package, target)
    env = {**_env_with(target), "OMP_NUM_THREADS": "1"}
    entry = _plugins_json(env)["videorl-models-llava-onevision"]
    assert entry["status"] == "ok" and entry["version"] == "0.1.0"
    assert entry["components"] == {"model_backends": ["llava_onevision"]}
    assert entry["hooks"] == ["register_model_backends"]

    listed = subprocess.run(
        [sys.executable, "-m", "videorl.cli", "models", "list", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    backends = {row["family"]: row for row in json.loads(listed)}
    assert backends["llava_onevision"]["model_types"] == ["llava_onevision"]
    assert backends["llava_onevision"]["plugin"] == "videorl-models-llava-onevision"
    assert {"qwen2_5_vl", "qwen3_vl"} <= set(backends)  # the first-party backends are still there

    # the tests import the installed copy, not the checkout's sources
    where = subprocess.run(
        [sys.executable, "-c", "import videorl_models_llava_onevision as m; print(m.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=tmp_path,
    ).stdout.strip()
    assert Path(where).is_relative_to(target), where
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(package / "tests")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert " passed" in tests.stdout and "skipped" not in tests.stdout, tests.stdout
