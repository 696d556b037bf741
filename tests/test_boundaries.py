"""The architecture's boundaries, checked on the source: what a plugin may import, and no import cycles.

A plugin (first-party, contrib, or made from the cookiecutter template) is written as a third party
would write it: it imports videorl only through ``videorl.api`` (which carries ``hookimpl``) and
``videorl.testing``, and never another plugin. Every other module of videorl may change without notice.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = {"videorl.api", "videorl.testing"}
TEMPLATE = ROOT / "contrib" / "plugin-template"


def _plugin_sources() -> Iterator[tuple[Path, str]]:
    """Every shipped source file of every plugin, and the tests of the contrib plugins and the template
    (written as a third party writes them), with the plugin's own top-level package."""
    for src in sorted([*ROOT.glob("plugins/*/src"), *ROOT.glob("contrib/*/src"), *TEMPLATE.glob("*/src")]):
        third_party_tests = (
            [] if src.parent.parent.name == "plugins" else list((src.parent / "tests").rglob("*.py"))
        )
        for package in sorted(p for p in src.iterdir() if p.is_dir() and not p.name.endswith(".egg-info")):
            for path in sorted([*package.rglob("*.py"), *third_party_tests]):
                yield path, package.name


def _parse(path: Path) -> ast.Module:
    # The template's names are cookiecutter variables (any identifier stands in for them), and its
    # ``{% if %}`` lines choose between top-level blocks: keeping every branch still parses.
    text = re.sub(r"\{\{\s*cookiecutter\.(\w+)\s*\}\}", r"\1", path.read_text())
    text = re.sub(r"^\{%.*%\}$", "", text, flags=re.MULTILINE)
    return ast.parse(text, filename=str(path))


def _imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for every absolute import, including those inside functions and TYPE_CHECKING."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def _violations(path: Path, own: str) -> list[str]:
    own = re.sub(r"\{\{\s*cookiecutter\.(\w+)\s*\}\}", r"\1", own)
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    bad = []
    for line, module in _imports(_parse(path)):
        top = module.split(".")[0]
        if top == "videorl" and module not in PUBLIC:
            bad.append(f"{where}:{line}: imports {module} (use videorl.api)")
        elif top.startswith("videorl_") and top != own:
            bad.append(f"{where}:{line}: imports another plugin, {module}")
    return bad


def test_the_checker_sees_every_plugin_and_the_template() -> None:
    owners = {own for _, own in _plugin_sources()}
    assert {"videorl_rewards", "videorl_benchmarks", "videorl_models", "videorl_reward_counting"} <= owners
    assert "videorl_models_llava_onevision" in owners
    assert any("cookiecutter" in own for own in owners)


def test_plugins_import_videorl_only_through_the_public_api() -> None:
    bad = [problem for path, own in _plugin_sources() for problem in _violations(path, own)]
    assert not bad, "\n".join(bad)


def test_the_checker_refuses_a_private_import_anywhere_in_a_file(tmp_path: Path) -> None:
    # Inside a function and under TYPE_CHECKING too: both are where the old leaks were.
    source = (
        "from typing import TYPE_CHECKING\n"
        "from videorl.api import hookimpl\n"
        "import videorl.testing\n"
        "if TYPE_CHECKING:\n"
        "    from videorl.media import VideoMetadata\n"
        "def f():\n"
        "    from videorl.atomic import atomic_write_bytes\n"
        "    import videorl_models.qwen\n"
        "    from videorl_mine import helper\n"
    )
    path = tmp_path / "probe.py"
    path.write_text(source)
    bad = _violations(path, "videorl_mine")
    assert [b.split(": ", 1)[1] for b in bad] == [
        "imports videorl.media (use videorl.api)",
        "imports videorl.atomic (use videorl.api)",
        "imports another plugin, videorl_models.qwen",
    ]


def _module_graph(src: Path, top: str) -> dict[str, set[str]]:
    """``module -> the modules of the same tree it imports`` (at any depth of the file)."""
    modules = {
        ".".join(p.relative_to(src).with_suffix("").parts).removesuffix(".__init__"): p
        for p in (src / top).rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for _, module in _imports(ast.parse(path.read_text())):
            # ``from a.b import c`` may name the module a.b.c: take the longest module the name covers.
            parts = module.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            if parts and ".".join(parts) not in (name, top):
                targets.add(".".join(parts))
        graph[name] = targets
    return graph


@pytest.mark.parametrize(
    ("src", "top", "pair"),
    [
        ("plugins/models/src", "videorl_models", ("videorl_models.qwen", "videorl_models.vision_sync")),
    ],
)
def test_no_import_cycle_between(src: str, top: str, pair: tuple[str, str]) -> None:
    """The two modules do not import each other, not even for annotations (TYPE_CHECKING). Core's
    rooms are held to a whole layer contract (core/tests/test_layers.py)."""
    graph = _module_graph(ROOT / src, top)
    a, b = pair
    assert not (b in graph[a] and a in graph[b]), f"{a} and {b} import each other"
