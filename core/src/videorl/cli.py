"""The ``videorl`` command line: loads the plugins, then lets them add their commands.

Global plugin flags (``--disable-plugin NAME``, ``--plugin MODULE``, ``--strict-plugins``) are read
before the command tree is built, because the plugins they govern are the ones that build it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from videorl import __version__
from videorl.plugins import Plugins, load_plugins

_VALUE_FLAGS = ("--disable-plugin", "--plugin")


def _global_flags(argv: Sequence[str]) -> tuple[list[str], list[str], bool]:
    """``--disable-plugin`` and ``--plugin`` values and ``--strict-plugins``, wherever they appear."""
    values: dict[str, list[str]] = {flag: [] for flag in _VALUE_FLAGS}
    strict = False
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if arg == "--strict-plugins":
            strict = True
        for flag in _VALUE_FLAGS:
            if arg == flag and i + 1 < len(args):
                values[flag].append(args[i + 1])
                i += 1
            elif arg.startswith(flag + "="):
                values[flag].append(arg.split("=", 1)[1])
        i += 1
    disabled = [n.strip() for v in values["--disable-plugin"] for n in v.split(",") if n.strip()]
    return disabled, values["--plugin"], strict


def _version_text(plugins: Plugins) -> str:
    lines = [f"videorl {__version__}"]
    for info in plugins.report(include_builtin=False):
        lines.append(f"  {info.name} {info.version or '?'} [{info.status}]")
    return "\n".join(lines)


def make_cli(plugins: Plugins) -> click.Group:
    """The root command group, with every plugin's commands added."""

    @click.group(
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
        epilog="Plugins: `videorl plugins` lists what is installed. Docs: docs/README.md",
    )
    @click.option(
        "--disable-plugin",
        "disable_plugin",
        multiple=True,
        metavar="NAME",
        help="Do not load this plugin distribution (repeatable; also VIDEORL_DISABLE_PLUGINS=a,b).",
    )
    @click.option(
        "--plugin", "plugin", multiple=True, metavar="MODULE", help="Load a plugin module by import path."
    )
    @click.option(
        "--strict-plugins",
        is_flag=True,
        help="Fail when a plugin fails to load (also VIDEORL_STRICT_PLUGINS=1).",
    )
    @click.version_option(__version__, "--version", message=_version_text(plugins))
    @click.pass_context
    def cli(
        ctx: click.Context, disable_plugin: tuple[str, ...], plugin: tuple[str, ...], strict_plugins: bool
    ) -> None:
        """videorl: RL with verifiable rewards for video-language models, and their evaluation."""
        ctx.obj = plugins

    plugins.call_register_commands(cli)
    return cli


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point of ``videorl``."""
    args = list(sys.argv[1:] if argv is None else argv)
    disabled, extra, strict = _global_flags(args)
    try:
        plugins = load_plugins(disable=disabled, extra=extra, strict=strict or None)
    except Exception as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(2)
    make_cli(plugins).main(args=args, prog_name="videorl")


if __name__ == "__main__":
    main()
