"""The docs keep up with the code: every hook documented with its signature, every guide linked."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from videorl import hookspecs

ROOT = Path(__file__).resolve().parents[1]


def test_every_hook_is_documented_with_its_signature() -> None:
    doc = (ROOT / "docs" / "plugin-authors" / "hooks.md").read_text()
    documented = set(re.findall(r"^### `(\w+)\((.*?)\)`", doc, flags=re.M))
    specs = {
        (name, ", ".join(inspect.signature(getattr(hookspecs, name)).parameters))
        for name in hookspecs.__all__
        if name.startswith("register_")
    }
    assert documented == specs


def test_plugin_author_guides_exist_and_are_linked() -> None:
    index = (ROOT / "docs" / "plugin-authors" / "README.md").read_text()
    for page in re.findall(r"\]\(([\w-]+\.md)\)", index):
        assert (ROOT / "docs" / "plugin-authors" / page).is_file(), page
    readme = (ROOT / "README.md").read_text()
    assert "docs/plugin-authors/README.md" in readme


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` (``videorl.a.b`` or ``videorl.a.b.Name.attr``) is a module or an attribute
    of one."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_architecture_names_only_modules_that_exist() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    dotted = set(re.findall(r"\bvideorl(?:\.\w+)+", doc))
    # the data-flow diagram names modules relative to the package (media.loader.MediaLoader)
    relative = re.findall(
        r"(?<![\w.])((?:data|media|train|rewards|eval|cluster|actor|rollout|runs|algorithms|encoding|episode)"
        r"(?:\.\w+)+)",
        doc,
    )
    dotted |= {f"videorl.{r}" for r in relative if not r.endswith((".jsonl", ".py", ".md"))}
    assert len(dotted) > 20 and not sorted(d for d in dotted if not _resolves(d))
    core = ROOT / "core" / "src" / "videorl"
    files = {f for f in re.findall(r"\b(\w+\.py)\b", doc) if not f.startswith("test_")}
    assert len(files) > 40
    assert not sorted(f for f in files if not any(core.rglob(f)))
    folders = set(re.findall(r"^\s*(?:\d+\s+)?(\w+)/ ", doc, flags=re.M))  # a layer's first room
    assert folders >= {"train", "cluster", "actor", "runs", "rollout"}
    assert not sorted(f for f in folders if not ((core / f).is_dir() or (ROOT / f).is_dir()))


def test_the_kinds_table_lists_every_hook() -> None:
    index = (ROOT / "docs" / "plugin-authors" / "README.md").read_text()
    listed = set(re.findall(r"^\| [\w ]+ \| `(register_\w+)` \|", index, flags=re.M))
    assert listed == {name for name in hookspecs.__all__ if name.startswith("register_")}


def test_the_readme_command_table_lists_every_command() -> None:
    import click

    from videorl.cli import make_cli
    from videorl.plugins import load_plugins

    readme = (ROOT / "README.md").read_text()
    block = readme.split("## The command line", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    documented = set()
    for line in block.strip().splitlines():
        command, *rest = line.split("#")[0].split()[1:3]  # videorl COMMAND [SUB|SUB2 ...]
        documented.add(command)
        documented.update(f"{command} {sub}" for word in rest for sub in word.split("|"))
    cli = make_cli(load_plugins())
    ctx = click.Context(cli)
    commands = set()
    for name in cli.list_commands(ctx):
        group = cli.get_command(ctx, name)
        commands.add(name)
        if isinstance(group, click.Group):
            commands.update(f"{name} {sub}" for sub in group.list_commands(ctx))
    assert not sorted(commands - documented), "add these commands to the README's command table"


def test_every_run_context_member_is_documented_for_loggers() -> None:
    from videorl.api import RunContext

    doc = (ROOT / "docs" / "plugin-authors" / "hooks.md").read_text()
    members = {n for n in vars(RunContext) if not n.startswith("_")} | set(RunContext.__dataclass_fields__)
    assert not sorted(m for m in members if f"`run.{m}" not in doc)
