"""Each distribution builds a wheel on its own, with its entry point and package data."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
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


@pytest.mark.parametrize("plugin", ["videorl-models-llava-onevision", "videorl-reward-counting"])
def test_a_contrib_sdist_carries_its_build_backend_and_installs(tmp_path: Path, plugin: str) -> None:
    """The contrib plugins build through _build_in_copy.py (backend-path): their sdist must ship it."""
    import tarfile

    source = tmp_path / plugin
    shutil.copytree(
        ROOT / "contrib" / plugin, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    code = "import sys, _build_in_copy as b; print(b.build_sdist(sys.argv[1]))"
    name = subprocess.run([sys.executable, "-c", code, str(tmp_path / "dist")], cwd=source, check=True,
                          capture_output=True, text=True).stdout.split()[-1]  # fmt: skip
    sdist = tmp_path / "dist" / name
    with tarfile.open(sdist) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
    assert {"_build_in_copy.py", "MANIFEST.in", "pyproject.toml"} <= members
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", str(tmp_path / "site"), str(sdist)],
        check=True, capture_output=True,
    )  # fmt: skip
    assert list((tmp_path / "site").glob("videorl_*.dist-info"))
    assert not [p for p in source.rglob("*") if p.name == "build" or p.suffix == ".egg-info"]
