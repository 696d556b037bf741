"""``videorl models check MODEL``: do the trainer and the rollout engine see the same prompt and video?"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from videorl.actor.parity import tolerance_for
from videorl.diagnostics.models_check import probe_prompts, run_check
from videorl.errors import AlignmentError, ConfigError, DataError
from videorl.plugins import Plugins

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.generation import RolloutEngine


@click.command("check")
@click.argument("model", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--engine",
    default=None,
    help="Rollout engine to compare (vllm, hf, ...); default: the config's, else vllm.",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A training config: its budgets, dtype, engine and engine options are used.",
)
@click.option(
    "--dtype",
    type=click.Choice(["float32", "bfloat16", "float16"]),
    default=None,
    help="Compute dtype of both sides; default: the config's model.dtype, else float32.",
)
@click.option(
    "--tolerance", type=float, default=None, help="Per-token log-prob tolerance; default: the dtype's."
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_obj
def check_command(
    plugins: Plugins,
    model: Path,
    engine: str | None,
    config_path: Path | None,
    dtype: str | None,
    tolerance: float | None,
    as_json: bool,
) -> None:
    """Run probe samples (videos, an image, text, two videos) through the trainer's path and the rollout
    engine and compare ids, placeholders, grids, frame metadata, positions, greedy tokens and log-probs.

    Exits 1 when a check fails. Run it first on every new checkpoint, engine version or GPU.
    """
    import torch

    from videorl.backend import backend_for_model
    from videorl.config import load_config
    from videorl.devices import local_device

    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout holds the report (--json)
    config = load_config(config_path, [f"model.path={model}"]) if config_path is not None else None
    family = config.model.family if config is not None else None
    backend = (
        plugins.model_backends.create(family, path=model)
        if family
        else backend_for_model(model, plugins.model_backends)
    )
    budget = config.data.visual_budget(backend.budget) if config is not None else backend.budget
    dtype = dtype or (config.model.dtype if config is not None else "float32")
    name = plugins.rollout_engines.canonical(
        engine or (config.rollout.engine if config is not None else "vllm")
    )
    prompts = probe_prompts(backend, budget)
    lengths = []
    for prompt in prompts:
        with contextlib.suppress(AlignmentError, DataError):  # reported by the check itself
            lengths.append(backend.prompt_length(prompt))
    device = local_device()
    options = config.rollout.engine_options if config is not None else None
    rollout = _start_engine(plugins, name, backend, model, dtype, options, lengths, device)
    try:
        trainer = backend.load_model(
            dtype=torch.float32, device=device
        )  # float32 masters, autocast as the actor
        report = run_check(
            backend,
            rollout,
            trainer,
            engine_name=name,
            dtype=dtype,
            prompts=prompts,
            tolerance=tolerance_for(
                dtype,
                tolerance
                if tolerance is not None
                else (config.rollout.parity_tolerance if config is not None else None),
            ),
            compute_dtype=getattr(torch, dtype),
            model_name=str(model),
        )
    finally:
        rollout.close()
    click.echo(json.dumps(report.to_json(), indent=2, default=str) if as_json else report.table())
    if not report.ok:
        raise SystemExit(1)


def _start_engine(
    plugins: Plugins,
    name: str,
    backend: ModelBackend,
    model: Path,
    dtype: str,
    options: Mapping[str, Any] | None,
    lengths: list[int],
    device: Any,
) -> RolloutEngine:
    """The engine under test, with room for the longest probe; one that cannot start on ``model`` at all
    is the check's first finding."""
    from videorl.rollout.factory import make_engine

    try:
        return make_engine(
            plugins, name, backend, model_path=str(model), dtype=dtype, seed=0, options=options,
            max_model_len=max([1024, *(n + 64 for n in lengths)]), device=device,
        )  # fmt: skip
    except ConfigError:
        raise
    except Exception as exc:
        raise click.ClickException(
            f"the {name} engine could not start on {model}: {type(exc).__name__}: {exc}. Training with it "
            "would fail the same way; check the engine's version and its support for this model_type."
        ) from exc
