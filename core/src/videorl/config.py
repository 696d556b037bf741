"""The training configuration: typed, nested dataclasses with visible defaults, loaded from YAML.

``load_config(path, overrides)`` reads a YAML file, applies ``key=value`` overrides (dotted keys,
values parsed as YAML scalars: ``algorithm.clip_high=0.3``, ``data.train_files=[a.jsonl,b.jsonl]``)
and checks every key and type against the dataclasses. Every problem found (an unknown key, a wrong
type, a value out of range) is reported at once in one :class:`~videorl.errors.ConfigError` that
names the full key, where it was set (``file:line`` or the override) and, for unknown keys, the
closest valid keys. ``dump_config`` writes the resolved configuration back as YAML (saved with every
run). The loader works for any dataclass schema, not only :class:`TrainConfig`.

The defaults are the seed's recipe (GRPO, DAPO clip-higher 0.2/0.28, KL off, n = 8, lr 1e-6
constant, AdamW (0.9, 0.999) with weight decay 0.01, gradient clip 1.0, 2 fps, 128 frames, 262,144
pixels per video frame, 1,048,576 per image, 4,096 response tokens). Dependencies: pyyaml only.
"""

# ruff: noqa: RUF009 - option() returns dataclasses.field(...), with the help text in its metadata
from __future__ import annotations

import contextlib
import copy
import difflib
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from videorl.errors import ConfigError
from videorl.rewards.config import RewardConfig

T = TypeVar("T")

__all__ = [
    "ActorConfig",
    "AlgorithmConfig",
    "ConfigKey",
    "DataConfig",
    "ModelConfig",
    "OptimConfig",
    "RayConfig",
    "RolloutConfig",
    "TrainConfig",
    "TrainerConfig",
    "config_keys",
    "config_to_dict",
    "dump_config",
    "load_config",
    "markdown_reference",
]


def option(default: Any = MISSING, help: str = "", *, factory: Any = MISSING) -> Any:
    """A dataclass field with its documentation (``help`` goes into docs/training.md)."""
    if factory is not MISSING:
        return field(default_factory=factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


Problems = list[tuple[str, str]]  # (key relative to the section, message)


# --- the schema -----------------------------------------------------------------------------------


@dataclass
class ModelConfig:
    path: str = option(
        "",
        "Directory of the base model (HF layout: config.json, weights, processor), or a Hub id (org/name) "
        "read from the local Hugging Face cache. Required.",
    )
    family: str | None = option(
        None,
        "Backend family (a registered model backend, e.g. qwen2_5_vl); null: from config.json model_type.",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = option(
        "bfloat16", "Parameter dtype of the actor and the rollout engine (use float32 to compare log-probs)."
    )
    suppress_token_ids: list[int] = option(
        factory=list,
        help="Extra token ids never sampled and masked in the training logits (the backend adds its "
        "visual placeholder and padded-vocabulary ids).",
    )

    def _problems(self) -> Problems:
        problems: Problems = []
        if not self.path.strip():
            problems.append(("path", "is required: the directory of the base model"))
        if any(i < 0 for i in self.suppress_token_ids):
            problems.append(("suppress_token_ids", "token ids must be >= 0"))
        return problems


@dataclass
class DataConfig:
    train_files: list[str] = option(
        factory=list,
        help="Training datasets (JSON/JSONL, Parquet, or an HF dataset folder; EasyVideoR1 or "
        "Video-R1 schema). Required.",
    )
    val_files: list[str] = option(
        factory=list, help="Validation datasets, scored every trainer.val_every steps."
    )
    media_root: str | None = option(
        None, "Directory that relative media paths are resolved against; null: each dataset file's directory."
    )
    cache_dir: str | None = option(
        None, "Frame cache directory (videorl cache build); null: decode on the fly."
    )
    source_mode: Literal["preprocessed_only", "prefer_preprocessed", "realtime_only"] = option(
        "prefer_preprocessed",
        "preprocessed_only: every video must be in the cache (checked at load); prefer_preprocessed: "
        "use the cache, decode what is missing; realtime_only: always decode.",
    )
    # The visual budget: null takes the model family's (its backend's ``budget``, which evaluation uses
    # too, so that one frame cache serves both); the Qwen families' values are the seed's recipe.
    video_fps: float | None = option(
        None, "Frames sampled per second of video; null: the model family's (Qwen: 2)."
    )
    video_max_frames: int | None = option(
        None, "Most frames sampled from one video; null: the model family's (Qwen: 128)."
    )
    video_min_pixels: int | None = option(
        None,
        "Least pixels per video frame after resizing; null: the model family's (Qwen: 4 × factor², 3136 for "
        "Qwen2/2.5-VL, 4096 for Qwen3-VL and Qwen3.5).",
    )
    video_max_pixels: int | None = option(
        None, "Most pixels per video frame after resizing; null: the model family's (Qwen: 262144)."
    )
    video_total_pixels: int | None = option(
        None, "Most pixels over all frames of one video; null: the model family's (Qwen: no limit)."
    )
    image_min_pixels: int | None = option(
        None, "Least pixels per image after resizing; null: the model family's (Qwen: 4 × factor²)."
    )
    image_max_pixels: int | None = option(
        None, "Most pixels per image after resizing; null: the model family's (Qwen: 1048576)."
    )
    max_prompt_length: int = option(
        24576,
        "Most prompt tokens (text and visual); a longer prompt is an error naming the sample (at load for "
        "cached videos). The default fits the default video budget of every Qwen-VL family plus text.",
    )
    rollout_batch_size: int = option(256, "Prompts per training step (each gets rollout.n responses).")
    shuffle: bool = option(True, "Shuffle the training data each epoch (seeded by seed and the epoch).")
    thinking: bool = option(
        True, "Use the thinking variant of the prompt templates (reason in <think>, answer in <answer>)."
    )
    prompt_template: str | None = option(
        None,
        "One prompt template for every sample: a .jinja file or a registered template name; null: the "
        "template of each sample's problem_type.",
    )

    def _problems(self) -> Problems:
        problems: Problems = []
        if not self.train_files:
            problems.append(("train_files", "give at least one training dataset file"))
        if self.source_mode == "preprocessed_only" and not self.cache_dir:
            problems.append(("cache_dir", "is required when data.source_mode is preprocessed_only"))
        if self.video_fps is not None and not self.video_fps > 0:
            problems.append(("video_fps", "must be > 0"))
        for key in (
            "video_max_frames",
            "video_min_pixels",
            "image_min_pixels",
            "max_prompt_length",
            "rollout_batch_size",
        ):
            value = getattr(self, key)
            if value is not None and value < 1:
                problems.append((key, "must be >= 1"))
        # the rest of the budget is checked against the family's values (visual_budget)
        for low, high in (
            ("video_min_pixels", "video_max_pixels"),
            ("image_min_pixels", "image_max_pixels"),
            ("video_min_pixels", "video_total_pixels"),
        ):
            lo, hi = getattr(self, low), getattr(self, high)
            if lo is not None and hi is not None and lo > hi:
                problems.append((high, f"must be >= data.{low}"))
        return problems

    def visual_budget(self, family: Any) -> Any:
        """``family`` (a :class:`videorl.backend.VisualBudget`, the backend's ``budget``) with the budget
        keys this section sets; a combination that does not fit is a :class:`ConfigError`."""
        from dataclasses import replace

        keys = (
            "video_fps",
            "video_max_frames",
            "video_min_pixels",
            "video_max_pixels",
            "video_total_pixels",
            "image_min_pixels",
            "image_max_pixels",
        )
        given = {key: getattr(self, key) for key in keys if getattr(self, key) is not None}
        try:
            return replace(family, **given)
        except ConfigError as exc:
            set_keys = ", ".join(f"data.{k}={v}" for k, v in given.items())
            raise ConfigError(
                f"data: {exc} (with {set_keys}; the other keys are the model family's: {family})"
            ) from None


@dataclass
class RolloutConfig:
    engine: str = option("vllm", "Rollout engine (a registered engine: vllm or hf).")
    n: int = option(8, "Responses sampled per prompt (the GRPO group size).")
    temperature: float = option(1.0, "Sampling temperature.")
    top_p: float = option(1.0, "Nucleus sampling probability mass.")
    top_k: int = option(-1, "Sample among the k most likely tokens; -1: all.")
    max_response_length: int = option(4096, "Most tokens generated per response.")
    enable_mix_policy: bool = option(
        False, "Put the sample's offline trajectory in the last of the n slots of its group (mix-policy)."
    )
    mix_policy_accuracy_threshold: float | None = option(
        None,
        "With mix-policy: replace the last slot only when the group's online accuracy is below this "
        "value; null: always (when the sample has an offline trajectory).",
    )
    engine_options: dict[str, Any] = option(
        factory=dict,
        help="Keyword options passed to the engine (e.g. gpu_memory_utilization, tensor_parallel_size).",
    )
    parity_check: Literal["first_step", "warn", "off"] = option(
        "first_step",
        "Compare the engine's log-probs with the actor's per modality on the first batch (and after a "
        "resume): first_step stops the run beyond the tolerance, warn logs and continues, off skips it.",
    )
    parity_tolerance: float | None = option(
        None,
        "Per-token log-prob tolerance of the parity checks (the mean limit scales with it); null: the "
        "default of model.dtype (docs/models.md).",
    )

    def _problems(self) -> Problems:
        problems: Problems = []
        if self.n < 2:
            problems.append(("n", "must be >= 2 (group-normalised advantages need two responses per prompt)"))
        if not self.temperature > 0:
            problems.append(("temperature", "must be > 0"))
        if not 0 < self.top_p <= 1:
            problems.append(("top_p", "must lie in (0, 1]"))
        if self.top_k == 0 or self.top_k < -1:
            problems.append(("top_k", "must be -1 (off) or >= 1"))
        if self.max_response_length < 1:
            problems.append(("max_response_length", "must be >= 1"))
        if self.parity_tolerance is not None and not self.parity_tolerance > 0:
            problems.append(("parity_tolerance", "must be > 0 (or null: the default of model.dtype)"))
        threshold = self.mix_policy_accuracy_threshold
        if threshold is not None:
            if not 0 <= threshold <= 1:
                problems.append(("mix_policy_accuracy_threshold", "must lie in [0, 1] (or be null)"))
            if not self.enable_mix_policy:
                problems.append(
                    (
                        "mix_policy_accuracy_threshold",
                        "is set but rollout.enable_mix_policy is false; enable it or unset the threshold",
                    )
                )
        return problems


@dataclass
class AlgorithmConfig:
    preset: str | None = option(
        None,
        "A registered algorithm preset (grpo, dr_grpo, dapo, gspo, gspo_token, cispo, rloo, remax, "
        "reinforce_pp, reinforce_pp_baseline; see docs/algorithms.md): sets the keys below that you leave at "
        "their default.",
    )
    adv_estimator: str = option("grpo", "A registered advantage estimator (grpo, rloo, remax, reinforce_pp).")
    estimator_options: dict[str, Any] = option(
        factory=dict,
        help="Options of the advantage estimator (the run's config.yaml lists them all, resolved).",
    )
    policy_loss: str = option("ppo_clip", "A registered policy loss (ppo_clip, gspo, cispo).")
    loss_options: dict[str, Any] = option(
        factory=dict, help="Options of the policy loss (the run's config.yaml lists them all, resolved)."
    )
    norm_adv_by_std: bool = option(
        True, "Divide by the group's standard deviation (false: subtract the mean only, as in Dr. GRPO)."
    )
    adv_eps: float = option(1e-6, "Added to the group standard deviation.")
    clip_low: float = option(0.2, "PPO ratio clip below: 1 - clip_low (DAPO ε_low).")
    clip_high: float = option(0.28, "PPO ratio clip above: 1 + clip_high (DAPO clip-higher ε_high).")
    loss_agg_mode: Literal["token-mean", "seq-mean-token-mean"] = option(
        "token-mean",
        "token-mean: every valid token weighs the same; seq-mean-token-mean: mean per response, then over responses.",
    )
    use_kl_loss: bool = option(False, "Add a k3 (low-variance) KL penalty to a frozen reference model.")
    kl_coef: float = option(0.01, "Weight of the KL penalty when algorithm.use_kl_loss is true.")
    entropy_coef: float = option(0.0, "Weight of the entropy bonus (entropy is logged either way).")
    dynamic_sampling: bool = option(
        False, "Drop groups whose rewards are all equal and refill the batch from the data (DAPO)."
    )
    dynamic_sampling_max_tries: int = option(
        20, "Most generation rounds to fill one batch with dynamic sampling."
    )
    overlong_buffer: int = option(
        0,
        "DAPO overlong shaping: the last L_cache tokens before rollout.max_response_length, over which "
        "the reward falls linearly by up to overlong_penalty; 0: off.",
    )
    overlong_penalty: float = option(1.0, "The overlong shaping's largest penalty (at the length limit).")
    overlong_filtering: bool = option(
        False, "DAPO overlong filtering: truncated responses (finish reason length) are left out of the loss."
    )
    rollout_correction: Literal["none", "tis", "mis"] = option(
        "none",
        "Correct for the rollout engine's log-probs differing from the trainer's: tis weighs each token's "
        "advantage by min(π_old/π_rollout, C); mis drops tokens (or sequences) whose weight leaves [1/C, C].",
    )
    rollout_correction_level: Literal["token", "sequence"] = option(
        "token", "token: one weight per token; sequence: the product of the sequence's token ratios."
    )
    rollout_correction_cap: float = option(2.0, "C of the rollout correction (> 1).")

    def _problems(self) -> Problems:
        problems: Problems = []
        if not 0 <= self.clip_low < 1:
            problems.append(("clip_low", "must lie in [0, 1)"))
        if not self.clip_high >= 0:
            problems.append(("clip_high", "must be >= 0"))
        if not self.adv_eps > 0:
            problems.append(("adv_eps", "must be > 0"))
        for key in ("kl_coef", "entropy_coef"):
            if not getattr(self, key) >= 0:
                problems.append((key, "must be >= 0"))
        if self.dynamic_sampling_max_tries < 1:
            problems.append(("dynamic_sampling_max_tries", "must be >= 1"))
        if self.overlong_buffer < 0:
            problems.append(("overlong_buffer", "must be >= 0"))
        if not self.overlong_penalty >= 0:
            problems.append(("overlong_penalty", "must be >= 0"))
        if not self.rollout_correction_cap > 1:
            problems.append(("rollout_correction_cap", "must be > 1"))
        return problems


@dataclass
class OptimConfig:
    lr: float = option(1e-6, "Learning rate (AdamW).")
    betas: tuple[float, float] = option((0.9, 0.999), "AdamW betas.")
    weight_decay: float = option(0.01, "AdamW weight decay.")
    eps: float = option(1e-8, "AdamW epsilon.")
    lr_warmup_steps: int = option(0, "Linear warm-up steps, then constant.")
    grad_clip: float | None = option(1.0, "Clip the global gradient norm to this value; null: no clipping.")

    def _problems(self) -> Problems:
        problems: Problems = []
        if not self.lr > 0:
            problems.append(("lr", "must be > 0"))
        if not all(0 <= b < 1 for b in self.betas):
            problems.append(("betas", "both must lie in [0, 1)"))
        if not self.weight_decay >= 0:
            problems.append(("weight_decay", "must be >= 0"))
        if not self.eps > 0:
            problems.append(("eps", "must be > 0"))
        if self.lr_warmup_steps < 0:
            problems.append(("lr_warmup_steps", "must be >= 0"))
        if self.grad_clip is not None and not self.grad_clip > 0:
            problems.append(("grad_clip", "must be > 0 (or null to disable clipping)"))
        return problems


@dataclass
class ActorConfig:
    global_batch_size: int = option(
        256,
        "Prompts per optimizer step (with their n responses); data.rollout_batch_size / this = updates per step.",
    )
    max_tokens_per_micro_batch: int = option(
        24096,
        "Token budget of one micro-batch (dynamic batching); a longer sequence gets a micro-batch of its own.",
    )
    gradient_checkpointing: bool = option(True, "Recompute activations in the backward pass to save memory.")

    def _problems(self) -> Problems:
        problems: Problems = []
        if self.global_batch_size < 1:
            problems.append(("global_batch_size", "must be >= 1"))
        if self.max_tokens_per_micro_batch < 1:
            problems.append(("max_tokens_per_micro_batch", "must be >= 1"))
        return problems


@dataclass
class TrainerConfig:
    max_steps: int = option(200, "Training steps (one step = one rollout batch and its updates).")
    save_every: int = option(
        20, "Write a checkpoint every N steps (and after the last); 0: only after the last."
    )
    keep_last: int = option(5, "Checkpoints kept (older ones are deleted); 0: keep all.")
    resume: str | None = option(
        None,
        "auto: continue from the last complete checkpoint of output_dir; a checkpoint directory; null: start fresh.",
    )
    val_every: int = option(0, "Score data.val_files every N steps; 0: never.")
    loggers: list[str] = option(
        factory=lambda: ["jsonl", "tensorboard"],
        help="Where each step's metrics go: registered loggers (jsonl, tensorboard, wandb, mlflow, a plugin's); "
        "jsonl (output_dir/metrics.jsonl, read by resume and videorl plot) is required.",
    )
    logger_options: dict[str, dict[str, Any]] = option(
        factory=dict,
        help="Options per logger, e.g. {wandb: {project: p, mode: offline}, mlflow: {tracking_uri: sqlite:///m.db}}.",
    )
    progress_bar: bool = option(True, "Show a progress bar with step, reward and ETA.")
    log_completions: int = option(
        0,
        "Sampled responses of each step written to output_dir/completions.jsonl (one per prompt first); 0: none.",
    )

    def _problems(self) -> Problems:
        problems: Problems = []
        if self.max_steps < 1:
            problems.append(("max_steps", "must be >= 1"))
        for key in ("save_every", "keep_last", "val_every", "log_completions"):
            if getattr(self, key) < 0:
                problems.append((key, "must be >= 0"))
        if "jsonl" not in self.loggers:
            problems.append(
                ("loggers", "must include jsonl (metrics.jsonl is what resume and videorl plot read)")
            )
        if len(set(self.loggers)) != len(self.loggers):
            problems.append(("loggers", f"names a logger twice: {self.loggers}"))
        unknown = sorted(set(self.logger_options) - set(self.loggers))
        if unknown:
            problems.append(
                ("logger_options", f"options for loggers not in trainer.loggers: {', '.join(unknown)}")
            )
        return problems


@dataclass
class RayConfig:
    """``videorl train CONFIG --ray``: a single controller and worker groups on a Ray cluster."""

    placement: Literal["colocated", "split"] = option(
        "colocated",
        "colocated: each actor worker also hosts a rollout engine (and the reference model when the KL "
        "penalty is on) on the same devices; split: rollout engines and reference models in worker groups "
        "of their own, with their own devices.",
    )
    actor_workers: int = option(1, "FSDP actor workers (ranks); data.rollout_batch_size must be a multiple.")
    rollout_workers: int | None = option(
        None, "Rollout engine workers with placement split; null: as many as actor workers."
    )
    reference_workers: int | None = option(
        None,
        "Reference-model workers with placement split and the KL penalty on; null: as many as actor workers.",
    )
    reward_workers: int = option(
        1, "Reward workers (CPU only); the responses of a step are shared among them."
    )
    gpus_per_worker: float | None = option(
        None, "GPUs of each actor, rollout and reference worker; null: 1 when the cluster has GPUs, else 0."
    )
    rollout_gpus_per_worker: float | None = option(
        None,
        "GPUs of each split rollout worker (e.g. 2 for a tensor-parallel-2 engine); null: gpus_per_worker.",
    )
    cpus_per_worker: float = option(1.0, "CPUs reserved for each worker in its placement-group bundle.")
    address: str | None = option(
        None, "Ray cluster to join (HOST:PORT, or auto); null: start a local Ray runtime on this machine."
    )
    dashboard: bool = option(
        False, "Start Ray's dashboard with a local runtime (listening on 127.0.0.1 only)."
    )
    auth: Literal["token", "disabled"] = option(
        "token",
        "Token authentication (Ray's RAY_AUTH_MODE) of a local runtime; joining a cluster, token presents "
        "this machine's token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) where there is one.",
    )
    worker_start_timeout: float = option(
        600.0, "Seconds to wait for the placement groups and workers to start."
    )

    def _problems(self) -> Problems:
        problems: Problems = []
        for key in ("actor_workers", "reward_workers"):
            if getattr(self, key) < 1:
                problems.append((key, "must be >= 1"))
        for key in ("rollout_workers", "reference_workers"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                problems.append((key, "must be >= 1 (or null)"))
        for key in ("gpus_per_worker", "rollout_gpus_per_worker"):
            if (getattr(self, key) or 0) < 0:
                problems.append((key, "must be >= 0"))
        if self.cpus_per_worker <= 0:
            problems.append(("cpus_per_worker", "must be > 0"))
        return problems


@dataclass
class TrainConfig:
    """Everything ``videorl train`` reads: one section per part of the system."""

    seed: int = option(1, "Seed of every random generator (python, numpy, torch, data order, sampling).")
    plugins: list[str] = option(
        factory=list,
        help="Plugin modules loaded for this run, before anything is validated: import paths (my_pkg.rewards) "
        "or .py files (relative to the config file), as --plugin; recorded in run.json.",
    )
    output_dir: str = option(
        "runs/train", "Run directory: config, metrics, checkpoints, TensorBoard, exported model."
    )
    model: ModelConfig = option(factory=ModelConfig, help="The policy model.")
    data: DataConfig = option(factory=DataConfig, help="Datasets and the video/image data path.")
    rollout: RolloutConfig = option(factory=RolloutConfig, help="Generation of the n responses per prompt.")
    algorithm: AlgorithmConfig = option(factory=AlgorithmConfig, help="Advantages and the policy loss.")
    optim: OptimConfig = option(factory=OptimConfig, help="The optimizer.")
    actor: ActorConfig = option(factory=ActorConfig, help="The actor update.")
    rewards: RewardConfig = option(
        factory=RewardConfig, help="Reward weights, the format rule, routing by problem_type, timeouts."
    )
    trainer: TrainerConfig = option(factory=TrainerConfig, help="Steps, checkpoints and logging.")
    ray: RayConfig = option(
        factory=RayConfig, help="Training on Ray (videorl train --ray): placement and workers."
    )

    def _problems(self) -> Problems:
        problems: Problems = []
        if self.data.rollout_batch_size % max(self.actor.global_batch_size, 1):
            problems.append(
                (
                    "actor.global_batch_size",
                    f"must divide data.rollout_batch_size ({self.data.rollout_batch_size})",
                )
            )
        if not self.output_dir.strip():
            problems.append(("output_dir", "must not be empty"))
        return problems


# --- YAML -------------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-6`` as a float (YAML 1.1 wants ``1.0e-6``)."""


_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _parse_yaml(text: str, where: str) -> tuple[Any, dict[tuple[str, ...], int], list[str]]:
    """The document, the line of every mapping key, and the duplicate-key problems."""
    try:
        node = yaml.compose(text, Loader=_Loader)
        data = yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}{line}: invalid YAML: {problem}") from exc
    lines: dict[tuple[str, ...], int] = {}
    duplicates: list[str] = []

    def walk(n: yaml.Node | None, path: tuple[str, ...]) -> None:
        if not isinstance(n, yaml.MappingNode):
            return
        seen: dict[str, int] = {}
        for key_node, value_node in n.value:
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                dotted = ".".join((*path, key))
                duplicates.append(f"{where}:{line}: duplicate key {dotted!r} (first set on line {seen[key]})")
            seen[key] = line
            lines[(*path, key)] = line
            walk(value_node, (*path, key))

    walk(node, ())
    return data, lines, duplicates


# --- building and checking ----------------------------------------------------------------------


class _Mismatch(Exception):
    """A value that does not fit its type; ``path``/``value`` are set when it is inside a container."""

    def __init__(self, expected: str, path: tuple[str, ...] | None = None, value: Any = None) -> None:
        super().__init__(expected)
        self.expected = expected
        self.path = path
        self.value = value


@dataclass
class _Context:
    schema: type
    origins: dict[tuple[str, ...], str] = field(default_factory=dict)  # key -> "file:line" / override
    raw_text: dict[tuple[str, ...], str] = field(default_factory=dict)  # key -> override value text
    problems: list[str] = field(default_factory=list)

    def where(self, path: tuple[str, ...]) -> str | None:
        path = tuple(part.split("[", 1)[0] for part in path)  # list items: the line of their key
        for i in range(len(path), 0, -1):
            if path[:i] in self.origins:
                return self.origins[path[:i]]
        return None

    def problem(self, path: tuple[str, ...], message: str) -> None:
        where = self.where(path)
        self.problems.append(f"{where}: {message}" if where else message)


def _dotted(path: Sequence[str]) -> str:
    return ".".join(path)


def _type_name(tp: Any) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return "any value"
    if is_dataclass(tp):
        return "a section (mapping of keys)"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        names = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" or null" if type(None) in args else "")
    if origin is list:
        return f"a list of {_type_name(args[0])}"
    if origin is tuple:
        return f"a list of {len(args)} values ({', '.join(_type_name(a) for a in args)})"
    if origin is dict:
        return f"a mapping of {_type_name(args[0])} to {_type_name(args[1])}"
    return getattr(tp, "__name__", str(tp))


def _convert(value: Any, tp: Any, path: tuple[str, ...], ctx: _Context) -> Any:
    """``value`` checked (and, for int->float, converted) against ``tp``; raises ``_Mismatch``."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return value
    if isinstance(tp, type) and is_dataclass(tp):
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise _Mismatch(_type_name(tp))
        return _build(tp, value, path, ctx)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, path, ctx)
            except _Mismatch as exc:
                if exc.path is not None:  # the error is inside a container: report it there
                    raise
        raise _Mismatch(_type_name(tp))
    if origin is Literal:
        if value in args and type(value) in {type(a) for a in args}:
            return value
        close = difflib.get_close_matches(str(value), [str(a) for a in args], n=1)
        raise _Mismatch(_type_name(tp) + (f" (did you mean {close[0]!r}?)" if close else ""))
    if origin is list or origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise _Mismatch(_type_name(tp))
        if origin is tuple and len(value) != len(args):
            raise _Mismatch(_type_name(tp))
        element_types = args if origin is tuple else [args[0]] * len(value)
        out = []
        for i, (item, item_tp) in enumerate(zip(value, element_types, strict=True)):
            item_path = (*path[:-1], f"{path[-1]}[{i}]")
            try:
                out.append(_convert(item, item_tp, item_path, ctx))
            except _Mismatch as exc:
                raise (exc if exc.path else _Mismatch(exc.expected, item_path, item)) from None
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(value, Mapping):
            raise _Mismatch(_type_name(tp))
        result = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Mismatch(_type_name(tp))
            try:
                result[key] = _convert(item, args[1], (*path, key), ctx)
            except _Mismatch as exc:
                raise (exc if exc.path else _Mismatch(exc.expected, (*path, key), item)) from None
        return result
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
        if path in ctx.raw_text and isinstance(value, (int, float, bool)):
            return ctx.raw_text[path]  # an override's text: `model.path=2024` means the string
    else:  # pragma: no cover - a schema author used a type this loader does not know
        raise TypeError(f"config key {_dotted(path)!r}: unsupported annotation {tp!r}")
    raise _Mismatch(_type_name(tp))


def _all_keys(schema: type, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    keys: list[tuple[str, ...]] = []
    hints = get_type_hints(schema)
    for f in fields(schema):
        keys.append((*prefix, f.name))
        if is_dataclass(hints[f.name]):
            keys += _all_keys(hints[f.name], (*prefix, f.name))
    return keys


def _suggest(path: tuple[str, ...], siblings: list[str], ctx: _Context) -> str:
    """' Did you mean ...?' for an unknown key: close siblings, then the same name in other sections."""
    name = path[-1]
    prefix = path[:-1]
    candidates = [_dotted((*prefix, s)) for s in difflib.get_close_matches(name, siblings, n=3, cutoff=0.6)]
    everywhere = _all_keys(ctx.schema)
    leaves = sorted({k[-1] for k in everywhere})
    for leaf in difflib.get_close_matches(name, leaves, n=3, cutoff=0.75):
        for key in everywhere:
            if key[-1] == leaf and _dotted(key) not in candidates and key[:-1] != prefix:
                candidates.append(_dotted(key))
    if not candidates:
        section = f" of section {_dotted(prefix)!r}" if prefix else ""
        return f" Valid keys{section}: {', '.join(siblings)}."
    return " Did you mean " + " or ".join(repr(c) for c in candidates[:3]) + "?"


def _is_container(tp: Any) -> bool:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return any(_is_container(a) for a in get_args(tp))
    return origin in (list, tuple, dict)


def _build(schema: type[T], raw: Mapping[Any, Any], path: tuple[str, ...], ctx: _Context) -> T:
    """An instance of ``schema`` from ``raw``; problems go to ``ctx`` (defaults stand in meanwhile).

    A section class with a ``from_dict`` classmethod (e.g. the rewards section) reads the shorthand
    forms of its own list and mapping values: those are handed to it unchecked, and a
    ``ConfigError`` it raises is reported at the section's location.
    """
    hints = get_type_hints(schema)
    names = [f.name for f in fields(schema) if f.init]  # type: ignore[arg-type]
    self_parsing = callable(getattr(schema, "from_dict", None))
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        key_path = (*path, str(key))
        if key not in names:
            ctx.problem(key_path, f"unknown key {_dotted(key_path)!r}.{_suggest(key_path, names, ctx)}")
            continue
        if self_parsing and _is_container(hints[key]):
            kwargs[key] = value
            continue
        try:
            kwargs[key] = _convert(value, hints[key], key_path, ctx)
        except _Mismatch as exc:
            where, got = (exc.path, exc.value) if exc.path else (key_path, value)
            ctx.problem(where, f"{_dotted(where)} must be {exc.expected}, got {got!r}")
    try:
        return schema.from_dict(kwargs) if self_parsing else schema(**kwargs)  # type: ignore[attr-defined]
    except ConfigError as exc:
        ctx.problem(path, str(exc))
        return schema()


def _check(obj: Any, path: tuple[str, ...], ctx: _Context) -> None:
    """Run every section's ``_problems`` (value ranges, cross-key rules), children first."""
    for f in fields(obj):
        child = getattr(obj, f.name)
        if is_dataclass(child):
            _check(child, (*path, f.name), ctx)
    check = getattr(obj, "_problems", None)
    if check is not None:
        for key, message in check():
            key_path = (*path, *key.split("."))
            ctx.problem(key_path, f"{_dotted(key_path)} {message}")


def _apply_override(raw: dict[str, Any], text: str, ctx: _Context) -> None:
    key, sep, value_text = text.partition("=")
    key = key.strip()
    where = f"override {text!r}"
    parts = tuple(key.split("."))
    if not sep or not key or not all(parts):
        ctx.problems.append(f"{where}: an override must look like key=value, e.g. algorithm.clip_high=0.3")
        return
    try:
        value = yaml.load(value_text, Loader=_Loader)  # _Loader is a SafeLoader
    except yaml.YAMLError as exc:
        ctx.problems.append(f"{where}: the value is not valid YAML ({getattr(exc, 'problem', exc)})")
        return
    schema: Any = ctx.schema
    for i, part in enumerate(parts[:-1]):  # a key of a known scalar cannot hold sub-keys
        hints = get_type_hints(schema) if is_dataclass(schema) else {}
        schema = hints.get(part)
        if schema is None or not is_dataclass(schema):
            if schema is not None and get_origin(schema) is not dict and schema is not Any:
                ctx.problems.append(
                    f"{where}: {_dotted(parts[: i + 1])} is not a section, it cannot hold {key!r}"
                )
                return
            break
    section: dict[str, Any] = raw
    for i, part in enumerate(parts[:-1]):
        child = section.get(part)
        if child is None:
            child = section[part] = {}
        if not isinstance(child, dict):
            ctx.problems.append(
                f"{where}: {_dotted(parts[: i + 1])} is not a section, it cannot hold {key!r}"
            )
            return
        section = child
    section[parts[-1]] = value
    for i in range(1, len(parts) + 1):
        if i == len(parts) or parts[:i] not in ctx.origins:
            ctx.origins[parts[:i]] = where
    ctx.raw_text[parts] = value_text.strip()


#: Keys of :class:`TrainConfig` that hold paths (or lists of them). A relative path written in a config
#: file is relative to the file's folder; one given as an override or left at its default, to the
#: working directory.
PATH_KEYS = (
    "output_dir",
    "model.path",
    "data.train_files",
    "data.val_files",
    "data.media_root",
    "data.cache_dir",
    "data.prompt_template",
    "trainer.resume",
    "plugins",
)


def _names_a_file(key: str, value: str, base: Path) -> bool:
    """Whether ``value`` of ``key`` is a path (not a registered template, ``auto`` or a module name)."""
    if key == "data.prompt_template":
        return value.endswith(".jinja") or (base / value).is_file()
    if key == "trainer.resume":
        return value != "auto"
    if key == "plugins":
        return value.endswith(".py")
    if key == "model.path":  # a Hub id (org/name) unless such a folder is there
        from videorl.hub import is_hub_id

        return not is_hub_id(value) or (base / value).exists()
    return True


def _map_paths(raw: dict[str, Any], base: Path, change: Any, keys: Sequence[str] = PATH_KEYS) -> None:
    """Replace, in place, every path value of ``keys`` (:data:`PATH_KEYS`) in ``raw`` by ``change(path)``."""
    for key in keys:
        *sections, name = key.split(".")
        node: Any = raw
        for section in sections:
            node = node.get(section) if isinstance(node, dict) else None
        if not isinstance(node, dict) or node.get(name) is None:
            continue
        value = node[name]
        if isinstance(value, str) and value and _names_a_file(key, value, base):
            node[name] = change(value)
        elif isinstance(value, list):
            node[name] = [
                change(v) if isinstance(v, str) and v and _names_a_file(key, v, base) else v for v in value
            ]


def _against(base: Path) -> Any:
    def resolve(value: str) -> str:
        return os.path.normpath(os.path.join(base, os.path.expanduser(value)))

    return resolve


def _resolve_hub_model(config: TrainConfig) -> None:
    """``model.path`` given as a Hub id becomes its snapshot folder when the local cache holds it
    (:mod:`videorl.hub`); otherwise it stays as given (a config is checked, printed or planned on
    machines without the model), and loading the model says what to download."""
    from videorl.hub import is_hub_id, resolve_model

    if not is_hub_id(config.model.path) or Path(config.model.path).exists():
        return
    with contextlib.suppress(ConfigError):
        config.model.path = str(resolve_model(config.model.path))


def load_config(
    path: str | Path | None = None,
    overrides: Sequence[str] = (),
    *,
    schema: type[T] = TrainConfig,  # type: ignore[assignment]
    data: Mapping[str, Any] | None = None,
) -> T:
    """The configuration from a YAML file, or from ``data`` (what :func:`config_to_dict` returns, e.g.
    sent to another process), or the defaults, with ``key=value`` overrides applied.

    Raises :class:`ConfigError` listing every unknown key, wrong type and out-of-range value, each
    with its full key and where it was set.
    """
    ctx = _Context(schema)
    raw: dict[str, Any] = copy.deepcopy(dict(data)) if data is not None else {}
    if path is not None:
        where = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {where}: {exc.strerror or exc}") from exc
        data, lines, duplicates = _parse_yaml(text, where)
        ctx.problems += duplicates
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: the config must be a mapping of keys, got {type(data).__name__}")
        raw = data
        ctx.origins.update({key: f"{where}:{line}" for key, line in lines.items()})
        path_keys = PATH_KEYS if schema is TrainConfig else getattr(schema, "path_keys", ())
        if path_keys:
            base = Path(path).absolute().parent
            _map_paths(raw, base, _against(base), path_keys)
    for text in overrides:
        _apply_override(raw, text, ctx)
    config = _build(schema, raw, (), ctx)
    if not ctx.problems:  # range checks only make sense on well-typed values
        _check(config, (), ctx)
    if isinstance(config, TrainConfig) and not ctx.problems:
        _resolve_hub_model(config)
    if ctx.problems:
        header = f"invalid configuration{f' in {path}' if path is not None else ''}:"
        raise ConfigError("\n  ".join([header, *ctx.problems]))
    return config


# --- dumping and documenting --------------------------------------------------------------------


def config_to_dict(config: Any) -> dict[str, Any]:
    """Plain dicts, lists and scalars (tuples become lists), ready for YAML or JSON.

    A section that defines ``to_dict()`` is written as that returns (the form its ``from_dict`` reads).
    """

    def plain(value: Any) -> Any:
        if callable(getattr(value, "to_dict", None)) and not isinstance(value, type):
            return plain(value.to_dict())
        if is_dataclass(value) and not isinstance(value, type):
            return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    result: dict[str, Any] = plain(config)
    return result


def dump_config(config: Any, run_dir: str | Path | None = None) -> str:
    """The resolved configuration as YAML; ``load_config`` reads it back to an equal object, with its
    relative paths made absolute (against the working directory), from whichever folder it is saved in.

    With ``run_dir`` (the file is saved there: a run's ``config.yaml``), the paths inside ``run_dir``
    are written relative to it (``output_dir: .``), so that the file stays valid, and names the
    run's own folder, when the run directory is moved or resumed on another machine.
    """
    data = config_to_dict(config)
    if isinstance(config, TrainConfig):
        cwd = Path.cwd()
        run = None if run_dir is None else Path(os.path.abspath(run_dir))

        def portable(value: str) -> str:
            absolute = Path(os.path.abspath(os.path.expanduser(value)))
            if run is not None and absolute.is_relative_to(run):
                return os.path.relpath(absolute, run)
            return str(absolute)

        _map_paths(data, cwd, portable)
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)


@dataclass(frozen=True)
class ConfigKey:
    """One documented key of a schema."""

    key: str
    type: str
    default: Any
    help: str


def _default_of(f: Any) -> Any:
    if f.default is not MISSING:
        return f.default
    return f.default_factory()


def config_keys(schema: type = TrainConfig, prefix: str = "") -> list[ConfigKey]:
    """Every leaf key of ``schema``, in declaration order, with type, default and help."""
    keys: list[ConfigKey] = []
    hints = get_type_hints(schema)
    for f in fields(schema):
        tp = hints[f.name]
        dotted = f"{prefix}{f.name}"
        if is_dataclass(tp):
            keys += config_keys(typing.cast(type, tp), f"{dotted}.")
        else:
            default = config_to_dict({"value": _default_of(f)})["value"]
            help = f.metadata.get("help") or f"See {schema.__module__}.{schema.__qualname__}."
            keys.append(ConfigKey(dotted, _short_type(tp), default, help))
    return keys


def _short_type(tp: Any) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return "any"
    if origin is Literal:
        return " \\| ".join(str(a) for a in args)
    if origin in (Union, types.UnionType):
        return " \\| ".join("null" if a is type(None) else _short_type(a) for a in args)
    if origin is list:
        return f"list[{_short_type(args[0])}]"
    if origin is tuple:
        return f"[{', '.join(_short_type(a) for a in args)}]"
    if origin is dict:
        return f"dict[{_short_type(args[0])}, {_short_type(args[1])}]"
    return getattr(tp, "__name__", str(tp))


def _yaml_scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return text.removesuffix("...").strip()


def markdown_reference(schema: type = TrainConfig) -> str:
    """The Markdown table of every key (generated into docs/training.md)."""
    rows = ["| Key | Type | Default | Meaning |", "|---|---|---|---|"]
    for key in config_keys(schema):
        meaning = key.help.replace("|", "\\|")
        rows.append(f"| `{key.key}` | {key.type} | `{_yaml_scalar(key.default)}` | {meaning} |")
    return "\n".join(rows) + "\n"
