"""The components and commands that ship with core, registered through the same hooks as plugins."""

from __future__ import annotations

from typing import TYPE_CHECKING

from videorl.commands import plugins
from videorl.commands.cache import cache_group
from videorl.commands.demo import demo_command
from videorl.commands.export import export_command
from videorl.commands.filter import filter_command
from videorl.commands.models import models_group
from videorl.commands.plan import plan_command
from videorl.commands.plot import plot_command
from videorl.commands.train import train_command
from videorl.hookspecs import hookimpl

if TYPE_CHECKING:
    import click

    from videorl.registry import Register


@hookimpl
def register_rollout_engines(register: Register) -> None:
    register("hf", "videorl.rollout.hf:HFEngine", description="transformers generate (exact, simple)")
    register("vllm", "videorl.rollout.vllm:VLLMEngine", description="vLLM (CPU build or CUDA)")
    register(
        "vllm-async",
        "videorl.rollout.vllm_async:AsyncVLLMEngine",
        description="vLLM AsyncLLM, chunked prefill",
    )


@hookimpl
def register_rollout_workflows(register: Register) -> None:
    register(
        "single_turn",
        "videorl.rollout.single_turn:SingleTurn",
        description="one response per episode (mix-policy, greedy baselines)",
    )
    register(
        "tool_agent",
        "videorl.rollout.tool_agent:ToolAgent",
        description="turns that call tools (rollout.tools) and see their replies",
    )


@hookimpl
def register_tools(register: Register) -> None:
    register(
        "get_frames", "videorl.tools.video:GetFrames", description="n frames between two times, as video"
    )
    register("seek", "videorl.tools.video:Seek", description="the frame at a time, as an image")
    register("zoom", "videorl.tools.video:Zoom", description="a region of a frame, enlarged, as an image")


@hookimpl
def register_loggers(register: Register) -> None:
    register("jsonl", "videorl.runs.trackers:JsonlLogger", description="output_dir/metrics.jsonl (required)")
    register("tensorboard", "videorl.runs.trackers:TensorBoardLogger", description="TensorBoard scalars")
    register("wandb", "videorl.runs.trackers:WandbLogger", description="Weights & Biases (videorl[wandb])")
    register("mlflow", "videorl.runs.trackers:MlflowLogger", description="MLflow (videorl[mlflow])")


_COMPONENTS = "videorl.algorithms.components"


@hookimpl
def register_advantage_estimators(register: Register) -> None:
    register("grpo", f"{_COMPONENTS}:GRPOEstimator", description="group-normalised rewards")
    register("rloo", f"{_COMPONENTS}:RLOOEstimator", description="leave-one-out group baseline")
    register("remax", f"{_COMPONENTS}:ReMaxEstimator", description="greedy response's reward as baseline")
    register(
        "reinforce_pp", f"{_COMPONENTS}:ReinforcePlusPlusEstimator", aliases=("reinforce++",),
        description="rewards whitened over the batch's tokens",
    )  # fmt: skip
    register("gdpo", f"{_COMPONENTS}:GDPOEstimator", description="each reward part group-normalised alone")


@hookimpl
def register_policy_losses(register: Register) -> None:
    register("ppo_clip", f"{_COMPONENTS}:PPOClipLoss", description="PPO clip, DAPO clip-higher")
    register("gspo", f"{_COMPONENTS}:GSPOLoss", description="sequence-level ratio (GSPO, GSPO-token)")
    register("cispo", f"{_COMPONENTS}:CISPOLoss", description="clipped detached IS weight × log-prob")
    register(
        "gmpo", f"{_COMPONENTS}:GMPOLoss", aliases=("geo_mean",),
        description="geometric mean of the log-clipped token ratios",
    )  # fmt: skip
    register("sapo", f"{_COMPONENTS}:SAPOLoss", description="soft sigmoid gate on the ratio, no clip")


@hookimpl
def register_algorithm_presets(register: Register) -> None:
    for name, attr in (
        ("grpo", "GRPO"), ("dr_grpo", "DR_GRPO"), ("dapo", "DAPO"), ("gspo", "GSPO"),
        ("gspo_token", "GSPO_TOKEN"),
        ("cispo", "CISPO"), ("rloo", "RLOO"), ("remax", "REMAX"), ("reinforce_pp", "REINFORCE_PP"),
        ("reinforce_pp_baseline", "REINFORCE_PP_BASELINE"), ("gdpo", "GDPO"), ("gmpo", "GMPO"),
        ("sapo", "SAPO"),
    ):  # fmt: skip
        register(name, f"{_COMPONENTS}:{attr}")


@hookimpl
def register_commands(cli: click.Group) -> None:
    from videorl.commands.eval import eval_group
    from videorl.commands.reward import reward_command

    cli.add_command(plugins.plugins_command)
    cli.add_command(cache_group)
    cli.add_command(eval_group)
    cli.add_command(models_group)
    cli.add_command(reward_command)
    cli.add_command(plot_command)
    cli.add_command(train_command)
    cli.add_command(filter_command)
    cli.add_command(export_command)
    cli.add_command(plan_command)
    cli.add_command(demo_command)
