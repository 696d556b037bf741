"""``videorl filter DATA --k 8 --model DIR --out OUT``: keep the samples the base model sometimes solves."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from videorl.atomic import check_output
from videorl.errors import VideorlError
from videorl.plugins import Plugins
from videorl.train.pass_rate import progress_path, read_progress, score_pass_rates, write_kept_rows

if TYPE_CHECKING:
    from videorl.config import TrainConfig
    from videorl.train.pass_rate import FilterSummary


@click.command("filter", context_settings={"ignore_unknown_options": True})
@click.argument("data", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("overrides", nargs=-1, metavar="[KEY=VALUE]...")
@click.option("--model", "model", required=True, metavar="DIR", help="The base model directory.")
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the kept rows (JSONL).",
)
@click.option(
    "--k", "k", default=8, show_default=True, type=click.IntRange(min=2), help="Rollouts per sample."
)
@click.option(
    "--engine", default=None, metavar="NAME", help="Rollout engine (hf, vllm; default: the config's)."
)
@click.option(
    "--cache-dir", default=None, metavar="DIR", help="Frame cache of the videos (videorl cache build)."
)
@click.option(
    "--config",
    "config_file",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="A training config whose data, rollout and rewards settings to use.",
)
@click.option(
    "--batch-size",
    default=16,
    show_default=True,
    type=click.IntRange(min=1),
    help="Prompts generated together.",
)
@click.pass_obj
def filter_command(
    plugins: Plugins,
    data: Path,
    overrides: tuple[str, ...],
    model: str,
    out: Path,
    k: int,
    engine: str | None,
    cache_dir: str | None,
    config_file: str | None,
    batch_size: int,
) -> None:
    """Score DATA with K rollouts per sample of the model in DIR; write to OUT the rows whose pass
    rate is strictly between 0 and 1, in DATA's schema with a `pass_rate` field.

    Prompts, sampling (temperature, top-p, response length) and rewards are those of training: the
    defaults, a --config file and dotted KEY=VALUE overrides (e.g. rollout.max_response_length=1024).
    Every sample's result is appended to OUT.progress.jsonl as it is scored; run the same command
    again after an interruption and it continues where it stopped.

    \b
    Examples:
      videorl filter train.jsonl --k 8 --model Qwen3-VL-8B --out filtered.jsonl --cache-dir cache/
      videorl filter train.jsonl --model DIR --out f.jsonl --engine hf data.thinking=false
    """
    from videorl.config import load_config

    items = [*overrides, f"model.path={model}", f"data.train_files=[{data}]", f"rollout.n={k}"]
    if engine is not None:
        items.append(f"rollout.engine={engine}")
    if cache_dir is not None:
        items.append(f"data.cache_dir={cache_dir}")
    try:
        check_output(out, inputs=[data, config_file], reads=[model], what="--out")
        config: TrainConfig = load_config(config_file, items)
        summary = _run(config, plugins, data, out, batch_size)
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(
        f"{summary.kept} of {summary.total} samples kept (0 < pass rate < 1); {summary.all_pass} always "
        f"solved, {summary.all_fail} never solved; written to {out}"
    )


def _run(config: TrainConfig, plugins: Plugins, data: Path, out: Path, batch_size: int) -> FilterSummary:
    from videorl.devices import local_device
    from videorl.rewards.router import RewardRouter
    from videorl.rollout.factory import make_engine, max_model_len
    from videorl.rollout.single_turn import sampling_params
    from videorl.train.compose import load_training_samples, make_backend, make_encoder, seed_everything

    seed_everything(config.seed)
    backend = make_backend(config, plugins)
    rewards = RewardRouter.from_registry(plugins.rewards, config.rewards)
    samples = load_training_samples(config, rewards, [str(data)])
    progress = progress_path(out)
    done = len(set(read_progress(progress, config.rollout.n)) & {s.id for s in samples})
    if done:
        click.echo(f"continuing: {done} of {len(samples)} samples already scored ({progress})")
    engine = make_engine(
        plugins,
        config.rollout.engine,
        backend,
        model_path=config.model.path,
        dtype=config.model.dtype,
        seed=config.seed,
        options=config.rollout.engine_options,
        device=local_device(),
        max_model_len=max_model_len(config),  # as in training: the longest prompt and response
    )
    try:
        rates = score_pass_rates(
            samples,
            make_encoder(config, backend, plugins),
            engine,
            rewards,
            backend,
            sampling_params(config, seed=config.seed),
            progress,
            batch_size=batch_size,
        )
    finally:
        engine.close()
    return write_kept_rows(data, samples, rates, out, media_root=config.data.media_root)
