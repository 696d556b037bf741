"""``videorl plan CONFIG --gpus N --gpu-memory GB [--nodes M]``: memory per GPU and node before launch."""

from __future__ import annotations

import json
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
        shown = f"{value:,.0f}" if key in ("kv_tokens", "groups_at_once") else f"{value:,.2f} {unit}"
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
@click.option("--json", "as_json", is_flag=True, help="Print the plan as one JSON object.")
@click.pass_obj
def plan_command(
    plugins: Plugins,
    config_file: str,
    overrides: tuple[str, ...],
    gpus: int,
    gpu_memory: float,
    nodes: int,
    as_json: bool,
) -> None:
    """Estimate the memory a colocated run of CONFIG needs per GPU and per node, and say what does not fit.

    The model is built on the meta device from its config.json (no weight is read); the sequence is
    the longest prompt the visual budget gives plus a full response. Estimates from tensor sizes, not
    measurements (docs/multi-node.md explains every piece).
    """
    import torch

    from videorl.config import load_config
    from videorl.train.compose import make_backend

    try:
        config: TrainConfig = load_config(config_file, list(overrides))
        backend = make_backend(config, plugins)
        shape = ModelShape.of(backend.load_model(device=torch.device("meta")))
        seq = sequence_tokens(config, backend, config.data.visual_budget(backend.budget))
        engine = capabilities_of(plugins.rollout_engines.get(config.rollout.engine))
        result = plan(config, shape, Placement(gpus, gpu_memory, nodes), seq, engine)
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(
            json.dumps(
                {
                    "parameters": shape.parameters,
                    "sequence": result.sequence,
                    "update": result.update,
                    "rollout": result.rollout,
                    "host_per_node": result.host_per_node,
                    "findings": result.findings,
                }
            )
        )
        return
    lines = [
        f"{config.model.path}: {shape.parameters / 1e9:.2f} B parameters "
        f"({shape.vision_parameters / 1e9:.2f} B "
        f"vision); {gpus} GPU(s) of {gpu_memory:g} GB on {nodes} node(s)",
        f"sequence: {seq['prompt']:,} prompt tokens ({seq['visual']:,} visual) + {seq['response']:,} "
        "response",
    ]
    lines += _table("update phase, per GPU", result.update)
    lines += _table("rollout phase, per GPU", result.rollout)
    lines += _table("host memory, per node", result.host_per_node)
    lines += [f"does not fit: {f}" for f in result.findings] or ["fits"]
    click.echo("\n".join(lines))
