"""``videorl plugins``: what is installed, what each plugin registers, and what failed."""

from __future__ import annotations

import json

import click

from videorl.backend import missing_backend_members
from videorl.errors import ComponentImportError
from videorl.plugins import Plugins


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*r) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def _summary(kind: str, names: list[str], width: int = 60) -> str:
    """``kind (n): a, b, …`` cut to about ``width`` characters (``--json`` lists every name)."""
    text = ", ".join(names)
    if len(text) > width:
        text = text[: width - 1].rsplit(", ", 1)[0] + ", …"
    return f"{kind} ({len(names)}): {text}"


def _check_backends(plugins: Plugins) -> None:
    """Mark a plugin failed when one of its backend classes lacks members of the ModelBackend protocol
    (or cannot be imported): it would fail only once a run has loaded its model."""
    registry = plugins.model_backends
    for entry in registry.entries():
        info = plugins.infos.get(entry.origin)
        if info is None or info.builtin or info.status != "ok" or registry.conflict(entry):
            continue
        try:
            target = entry.load("model backend")
        except ComponentImportError as exc:
            info.status, info.error = "failed", str(exc)
            continue
        missing = missing_backend_members(target) if isinstance(target, type) else []
        if missing:
            info.status = "failed"
            info.error = (
                f"model backend {entry.name!r} ({entry.target}) lacks ModelBackend members: "
                f"{', '.join(missing)} (see docs/plugin-authors/model-backends.md)"
            )


@click.command("plugins")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of the plugins.")
@click.option("--requirements", is_flag=True, help="Print name==version lines (recorded by every run).")
@click.option("--all", "include_builtin", is_flag=True, help="Include core's built-in components.")
@click.option("--hook", default=None, metavar="NAME", help="Only plugins that implement this hook.")
@click.pass_obj
def plugins_command(
    plugins: Plugins, as_json: bool, requirements: bool, include_builtin: bool, hook: str | None
) -> None:
    """List installed plugins with their version, hooks, components and status."""
    if requirements:
        click.echo("\n".join(plugins.requirements()))
        return
    _check_backends(plugins)
    infos = [i for i in plugins.report(include_builtin) if hook is None or hook in i.hooks]
    if as_json:
        click.echo(json.dumps([i.as_dict() for i in infos], indent=2))
        return
    rows = []
    for info in infos:
        components = "; ".join(_summary(k, v) for k, v in info.components.items())
        detail = components if info.status == "ok" else (info.error or "").splitlines()[-1]
        rows.append([info.name, info.version or "-", info.status, detail])
        rows += [["", "", "conflict", message] for message in info.conflicts]
    if not rows:
        click.echo("No plugins installed. `pip install ./plugins/rewards` installs the reward library.")
        return
    click.echo(_table(rows, ["plugin", "version", "status", "components / error"]))
