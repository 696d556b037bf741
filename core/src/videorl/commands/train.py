"""``videorl train CONFIG [key=value ...]``: GRPO training, in one process, under torchrun, or on Ray."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from videorl import algorithms
from videorl.config import dump_config, load_config
from videorl.errors import VideorlError
from videorl.plugins import Plugins
from videorl.rewards.router import RewardRouter
from videorl.runs.plugins import load_run_plugins

if TYPE_CHECKING:
    from videorl.config import TrainConfig


@click.command("train", context_settings={"ignore_unknown_options": True})
@click.argument("config_file", metavar="CONFIG", type=click.Path(exists=True, dir_okay=False))
@click.argument("overrides", nargs=-1, metavar="[KEY=VALUE]...")
@click.option(
    "--resume", default=None, metavar="auto|DIR", help="Continue from a checkpoint (auto: the latest)."
)
@click.option("--print-config", is_flag=True, help="Print the resolved config and exit.")
@click.option(
    "--ray",
    "use_ray",
    is_flag=True,
    help="Train with a controller and worker groups on Ray (the ray section).",
)
@click.option(
    "--ray-address",
    default=None,
    metavar="HOST:PORT",
    help="Join this Ray cluster (implies --ray; else ray.address).",
)
@click.pass_obj
def train_command(
    plugins: Plugins,
    config_file: str,
    overrides: tuple[str, ...],
    resume: str | None,
    print_config: bool,
    use_ray: bool,
    ray_address: str | None,
) -> None:
    """Train a policy with GRPO as CONFIG (YAML) describes, with dotted KEY=VALUE overrides.

    \b
    Examples:
      videorl train examples/demo.yaml trainer.max_steps=50 rollout.n=4
      torchrun --nproc-per-node 2 -m videorl.cli train CONFIG      # FSDP2 over 2 processes
      videorl train CONFIG --resume auto                            # continue after a crash
      videorl train CONFIG --ray ray.actor_workers=2                # a local Ray runtime, 2 FSDP workers
      videorl train CONFIG --ray-address HEAD:6379                  # join a Ray cluster
    """
    config = _load(config_file, overrides, resume)
    if config.plugins:
        plugins = _run_plugins(config)
    try:  # the preset applied and every option spelled out: what --print-config and the run's config show
        config.algorithm = algorithms.resolve(config.algorithm, plugins)
    except VideorlError as exc:
        raise click.ClickException(f"{config_file}: {exc}") from None
    if print_config:  # after the run's plugins are loaded: they may provide the rewards it names
        _print_config(config, plugins, config_file)
    elif use_ray or ray_address:
        _train_on_ray(config, plugins, ray_address)
    elif config.trainer.max_staleness > 0:
        raise click.ClickException(
            f"{config_file}: trainer.max_staleness: {config.trainer.max_staleness} trains asynchronously on "
            "Ray: add --ray (with ray.placement: split), or set trainer.max_staleness: 0"
        )
    else:
        _train_here(config, plugins)


def _load(config_file: str, overrides: tuple[str, ...], resume: str | None) -> TrainConfig:
    items = [*overrides, *([f"trainer.resume={resume}"] if resume is not None else [])]
    try:
        return load_config(config_file, items)
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from None


def _run_plugins(config: TrainConfig) -> Plugins:
    """The installed plugins with the run's (``plugins:``) and the global flags' modules."""
    flags = click.get_current_context().find_root().params  # videorl's global plugin flags
    try:
        return load_run_plugins(
            config.plugins,
            base=Path.cwd(),  # load_config made the file's .py paths absolute; overrides' are the CWD's
            disable=flags.get("disable_plugin", ()),
            extra=flags.get("plugin", ()),
            strict=flags.get("strict_plugins") or None,
        )
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from None


def _print_config(config: TrainConfig, plugins: Plugins, config_file: str) -> None:
    try:
        RewardRouter.from_registry(plugins.rewards, config.rewards).check_config()
    except VideorlError as exc:
        raise click.ClickException(f"{config_file}: {exc}") from None
    click.echo(dump_config(config), nl=False)


def _train_on_ray(config: TrainConfig, plugins: Plugins, address: str | None) -> None:
    from videorl.cluster.launch import train_on_ray  # Ray and torch

    try:
        last = train_on_ray(config, plugins, address=address)
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"trained to step {last}; run directory: {config.output_dir}")


def _train_here(config: TrainConfig, plugins: Plugins) -> None:
    """One process, or this torchrun rank."""
    from videorl.parallel import close_distributed, init_distributed  # torch
    from videorl.train.compose import build_training

    dist = init_distributed(config.actor.sequence_parallel_size)
    try:
        training = build_training(config, plugins, dist=dist)
        try:
            last = training.run()
        finally:
            training.engine.close()
    except VideorlError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        close_distributed()
    if dist.rank == 0:
        click.echo(f"trained to step {last}; run directory: {config.output_dir}")
