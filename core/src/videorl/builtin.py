"""The components and commands that ship with core, registered through the same hooks as plugins."""

from __future__ import annotations

from typing import TYPE_CHECKING

from videorl.hookspecs import hookimpl

if TYPE_CHECKING:
    import click



@hookimpl
def register_commands(cli: click.Group) -> None:
    from videorl.commands import plugins

    cli.add_command(plugins.plugins_command)
