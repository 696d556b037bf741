"""``videorl plan CONFIG --gpus N --gpu-memory GB [--nodes M] [--shape FAMILY-SIZE]``: memory per GPU
and node before launch."""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from videorl.diagnostics.plan import ModelShape, Placement, plan, sequence_tokens
from videorl.errors import VideorlError
from videorl.generation import capabilities_of

if TYPE_CHECKING:
    from videorl.config import TrainConfig
    from videorl.plugins import Plugins


def _table(title: str, values: dict[str, Any], unit: str = "GB") -> list[str]:
    lines = [title]
    for key, value in values.items():
        counts = ("kv_tokens", "groups_at_once", "kv_bytes_per_token")
        shown = f"{value:,.0f}" if key in counts else f"{value:,.2f} {unit}"
        lines.append(f"  {key:<40} {shown}")
    return lines


@click.command("plan", context_settings={"ignore_unknown_options": True})
@click.argument("config_file", metavar="CONFIG", type=click.Path(exists=True, dir_okay=False))
@click.argument("overrides", nargs=-1, metavar="[KEY=VALUE]...")
@click.option(
    "--gpus", type=int, required=True, help="GPUs of the run (the FSDP ranks, colocated with the engines)."
)
@click.option("--gpu-memory", type=float, required=True, help="Memory of one GPU, in GB (10^9 bytes).")
@click.option("--nodes", type=int, default=1, show_default=True, help="Nodes the GPUs are spread over.")
@click.option(
    "--host-memory", type=float, default=None, help="Host memory of one node, in GB (checked when given)."
)
@click.option(
    "--shape",
    default=None,
    metavar="FAMILY-SIZE",
    help="Plan a public model shape (e.g. qwen3_vl-8b) instead of model.path: no checkpoint needed.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as one JSON object.")
@click.pass_obj
def plan_command(
    plugins: Plugins,
    config_file: str,
    overrides: tuple[str, ...],
    gpus: int,
    gpu_memory: float,
    nodes: int,
    host_memory: float | None,
    shape: str | None,
    as_json: bool,
) -> None:
    """Estimate the memory a run of CONFIG needs per GPU and per node, and say what does not fit.

    The model is built on the meta device from its config.json (no weight is read; a folder with a
    bare config.json is enough, or --shape); the sequence is the longest prompt the visual budget gives
    plus a full response. With ray.placement split the actor and engine GPUs are apart. Estimates from
    tensor sizes, not measurements (docs/multi-node.md explains every piece).
    """
    with tempfile.TemporaryDirectory(prefix="videorl-plan-") as tmp:
        if shape is not None:
            from videorl.diagnostics.shapes import write_shape

            try:
                folder = write_shape(shape, Path(tmp) / shape)
            except VideorlError as exc:
                raise click.ClickException(str(exc)) from None
            overrides = (*overrides, f"model.path={folder}")
        _plan(plugins, config_file, overrides, Placement(gpus, gpu_memory, nodes, host_memory), as_json)


def _plan(
    plugins: Plugins, config_file: str, overrides: tuple[str, ...], placement: Placement, as_json: bool
) -> None:
    import torch

    from videorl.config import load_config
    from videorl.train.compose import make_backend

    try:
        config: TrainConfig = load_config(config_file, list(overrides))
        backend = make_backend(config, plugins)
        model = ModelShape.of(backend.load_model(device=torch.device("meta")), backend)
        seq = sequence_tokens(config, backend, config.data.visual_budget(backend.budget))
        engine = capabilities_of(plugins.rollout_engines.get(config.rollout.engine))
        result = plan(config, model, placement, seq, engine)
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(
            json.dumps(
                {
                    "parameters": model.parameters,
                    "layout": asdict(result.layout) if result.layout else None,
                    "sequence": result.sequence,
                    "update": result.update,
                    "rollout": result.rollout,
                    "host_per_node": result.host_per_node,
                    "longest_video": result.longest,
                    "findings": result.findings,
                }
            )
        )
        return
    layout = result.layout
    assert layout is not None
    where = (
        f"split: {layout.actor_gpus} actor GPUs, {layout.engines} engines of {layout.engine_gpus} GPU(s)"
        if layout.split
        else f"colocated: FSDP over {layout.actor_gpus} GPUs, engines of tensor parallel {layout.tp}"
    )
    lines = [
        f"{config.model.path}: {model.parameters / 1e9:.2f} B parameters "
        f"({model.vision_parameters / 1e9:.2f} B vision); {placement.gpus} GPU(s) of "
        f"{placement.gpu_memory_gb:g} GB on {placement.nodes} node(s); {where}",
        f"sequence: {seq['prompt']:,} prompt tokens ({seq['visual']:,} visual"
        + ("; estimated, no tokenizer" if seq["estimated"] else "")
        + f") + {seq['response']:,} response"
        + (
            f"; {-(-seq['sequence'] // config.actor.sequence_parallel_size):,} tokens per rank "
            f"(sequence parallel {config.actor.sequence_parallel_size})"
            if config.actor.sequence_parallel_size > 1
            else ""
        ),
        f"longest video that fits per GPU: {result.longest['frames']:,} frames of "
        f"{seq['frame_pixels']:,} pixels ({result.longest['visual']:,} visual tokens)",
    ]
    lines += _table("update phase, per GPU", result.update)
    lines += _table("rollout phase, per GPU", result.rollout)
    lines += _table("host memory, per node", result.host_per_node)
    lines += [f"does not fit: {f}" for f in result.findings] or ["fits"]
    click.echo("\n".join(lines))
