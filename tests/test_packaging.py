"""Each distribution builds a wheel on its own, with its entry point and package data."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import PathDistribution
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _wheel(project: Path, out: Path) -> zipfile.ZipFile:
    """Build from a copy, so that setuptools' build/ and egg-info never land in the checkout."""
    source = out / "src"
    shutil.copytree(project, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    project = source
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "-w",
            str(out),
            str(project),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel)


def _read(wheel: zipfile.ZipFile, suffix: str) -> str:
    (name,) = [n for n in wheel.namelist() if n.endswith(suffix)]
    return wheel.read(name).decode()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("folder", "dist", "package", "data"),
    [
        ("core", "videorl", "videorl", ["videorl/py.typed"]),
        (
            "plugins/rewards",
            "videorl-rewards",
            "videorl_rewards",
            ["videorl_rewards/templates/multiple_choice.jinja"],
        ),
        ("plugins/benchmarks", "videorl-benchmarks", "videorl_benchmarks", []),
        ("plugins/models", "videorl-models", "videorl_models", []),
    ],
)
def test_distribution_builds_alone(
    tmp_path: Path, folder: str, dist: str, package: str, data: list[str]
) -> None:
    wheel = _wheel(ROOT / folder, tmp_path)
    names = wheel.namelist()
    assert f"{package}/__init__.py" in names
    for item in data:
        assert item in names, item
    metadata = _read(wheel, ".dist-info/METADATA")
    assert f"Name: {dist}" in metadata and "Version: 0.1.0" in metadata
    if dist == "videorl":
        assert "videorl = videorl.cli:main" in _read(wheel, "entry_points.txt")
        assert not any(n.startswith(("videorl_", "tests/")) for n in names)  # no plugin inside core
    else:
        assert "Requires-Dist: videorl" in metadata
        entry = _read(wheel, "entry_points.txt")
        assert f"[videorl]\n{dist} = {package}.plugin" in entry
        source = "\n".join(wheel.read(n).decode() for n in names if n.endswith(".py"))
        for other in {"videorl_rewards", "videorl_benchmarks", "videorl_models"} - {package}:
            assert f"import {other}" not in source and f"from {other}" not in source  # public API only


@pytest.mark.parametrize(
    "plugin", ["videorl-models-llava-onevision", "videorl-reward-counting", "videorl-algorithm-gmpo"]
)
@pytest.mark.slow
def test_a_contrib_plugin_builds_from_a_read_only_folder_and_its_sdist_installs(
    tmp_path: Path, plugin: str
) -> None:
    """flit_core (the contrib plugins' build backend) writes nothing beside the sources, offline."""
    import stat
    import tarfile

    source = tmp_path / plugin
    shutil.copytree(ROOT / "contrib" / plugin, source, ignore=shutil.ignore_patterns("build", "*.egg-info",
                    "__pycache__", ".pytest_cache"))  # fmt: skip
    files = sorted(str(p.relative_to(source)) for p in source.rglob("*"))
    for path in [source, *source.rglob("*")]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w",
                        str(tmp_path / "wheel"), str(source)], check=True, capture_output=True)  # fmt: skip
        code = "import sys, flit_core.buildapi as b; print(b.build_sdist(sys.argv[1]))"
        name = subprocess.run([sys.executable, "-c", code, str(tmp_path / "dist")], cwd=source, check=True,
                              capture_output=True, text=True).stdout.split()[-1]  # fmt: skip
        assert sorted(str(p.relative_to(source)) for p in source.rglob("*")) == files  # nothing written
    finally:
        for path in [source, *source.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)  # so that tmp_path can be removed
    with tarfile.open(tmp_path / "dist" / name) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
    package = plugin.replace("-", "_")
    assert {"pyproject.toml", "README.md", f"src/{package}/plugin.py"} <= members
    assert any(m.startswith("tests/test_") for m in members)  # the sdist carries the plugin's tests
    sdist = tmp_path / "dist" / name
    subprocess.run([*pip, "install", "--no-deps", "--no-build-isolation", "--no-index", "--target",
                    str(tmp_path / "site"), str(sdist)], check=True, capture_output=True)  # fmt: skip
    (dist_info,) = (tmp_path / "site").glob(f"{package}-*.dist-info")  # one version installed
    (entry,) = PathDistribution(dist_info).entry_points
    assert (entry.group, entry.name, entry.value) == ("videorl", plugin, f"{package}.plugin")
