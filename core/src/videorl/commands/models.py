"""``videorl models``: the installed model backends, and tiny random checkpoints for tests and demos."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import click

from videorl.commands.models_check import check_command
from videorl.plugins import Plugins


def _describe(plugins: Plugins) -> list[dict[str, Any]]:
    rows = []
    for entry in plugins.model_backends.entries():
        conflict = plugins.model_backends.conflict(entry)
        backend = None if conflict else entry.load("model backend")
        rows.append(
            {
                "family": entry.name,
                "model_types": list(getattr(backend, "model_types", ())),
                "factor": getattr(backend, "factor", None),
                "temporal_patch_size": getattr(backend, "temporal_patch_size", None),
                "plugin": entry.origin,
                "description": conflict or entry.description,
            }
        )
    return rows


@click.group("models")
def models_group() -> None:
    """Model backends: list them, build tiny random checkpoints."""


models_group.add_command(check_command)


@models_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_obj
def list_command(plugins: Plugins, as_json: bool) -> None:
    """List the model backends, the model_types they serve and their patch×merge factor."""
    rows = _describe(plugins)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("No model backends installed. `pip install ./plugins/models` installs the Qwen-VL ones.")
        return
    width = max(len(row["family"]) for row in rows)
    types = max(len(", ".join(row["model_types"])) for row in rows)
    for row in rows:
        click.echo(
            f"{row['family']:<{width}}  factor {row['factor']!s:<3} model_types "
            f"{', '.join(row['model_types']):<{types}}  [{row['plugin']}] {row['description']}"
        )


@models_group.command("tiny")
@click.argument("family")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random weights.")
@click.option("--width", type=int, default=64, show_default=True, help="Text hidden size (vision: half).")
@click.pass_obj
def tiny_command(plugins: Plugins, family: str, out_dir: Path, seed: int, width: int) -> None:
    """Write a tiny random checkpoint of FAMILY (a family or model_type, e.g. qwen3_vl_moe) to OUT_DIR."""
    registry = plugins.model_backends
    try:
        name = registry.canonical(family)
    except Exception as exc:
        raise click.BadParameter(str(exc), param_hint="FAMILY") from None
    backend = registry.get(name)
    builder = getattr(backend, "build_tiny", None)
    if builder is None:
        raise click.ClickException(f"the {name} backend ({registry.entry(name).origin}) builds no tiny model")
    model_type = family if family in getattr(backend, "model_types", ()) else None
    options: dict[str, Any] = {"model_type": model_type, "seed": seed, "width": width}
    if (
        "width" not in inspect.signature(builder).parameters
    ):  # the older build_tiny(out_dir, *, model_type, seed)
        if width != 64:
            raise click.BadParameter(
                f"the {name} backend ({registry.entry(name).origin}) builds its tiny model at one width only",
                param_hint="--width",
            )
        del options["width"]
    try:
        path = builder(out_dir, **options)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--width") from None
    click.echo(f"wrote a tiny {model_type or name} checkpoint to {path}")
