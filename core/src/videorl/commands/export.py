"""``videorl export RUN_OR_CHECKPOINT OUT_DIR``: a trained policy as a plain HF model directory."""

from __future__ import annotations

from pathlib import Path

import click

from videorl.actor.lora import export_policy
from videorl.errors import VideorlError
from videorl.plugins import Plugins
from videorl.runs.export import base_model_of, resolve_checkpoint


@click.command("export")
@click.argument(
    "source", metavar="RUN_OR_CHECKPOINT", type=click.Path(exists=True, file_okay=False, path_type=Path)
)
@click.argument("out_dir", metavar="OUT_DIR", type=click.Path(path_type=Path))
@click.option(
    "--base-model",
    default=None,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The model the run started from (default: model.path of the run's config.yaml).",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace OUT_DIR if it is an earlier export (never the run, the base model or another folder).",
)
@click.option(
    "--adapter",
    is_flag=True,
    help="A LoRA run: write its adapter in PEFT's format (PeftModel.from_pretrained loads it) instead of "
    "the base model with the adapter merged in.",
)
@click.option(
    "--dtype",
    default=None,
    type=click.Choice(["float32", "bfloat16", "float16"]),
    help="The weights' dtype (default: model.dtype of the run's config.yaml, the dtype it generated with; "
    "float32 keeps a full fine-tuning run's float32 master weights).",
)
@click.pass_obj
def export_command(
    plugins: Plugins,
    source: Path,
    out_dir: Path,
    base_model: Path | None,
    overwrite: bool,
    adapter: bool,
    dtype: str | None,
) -> None:
    """Write the policy of a checkpoint (or of a run's latest undamaged checkpoint) to OUT_DIR as a plain
    HF model directory: the base model's config, tokenizer and processor with the trained weights,
    loadable with `from_pretrained` and by vLLM (a LoRA run's adapters merged into the base weights),
    in the run's model.dtype unless --dtype says otherwise. OUT_DIR must lie outside the run and the
    base model.

    \b
    Examples:
      videorl export runs/demo/run exported/            # the run's latest checkpoint
      videorl export runs/demo/run/checkpoints/step_000050 exported-50/
      videorl export runs/lora/run adapter/ --adapter   # a LoRA run's adapter alone
    """

    if out_dir.exists() and not overwrite:
        raise click.ClickException(f"{out_dir} already exists; choose another OUT_DIR or pass --overwrite")
    try:
        checkpoint = resolve_checkpoint(source)
        base = base_model if base_model is not None else base_model_of(checkpoint)
        written = export_policy(
            checkpoint,
            base,
            out_dir,
            plugins.model_backends,
            adapter=adapter,
            overwrite=overwrite,
            dtype=dtype,
        )
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"exported {checkpoint} to {written}")
