"""The evaluation configuration: the same typed schema and loader as training's (:mod:`videorl.config`).

``videorl eval run [CONFIG] [KEY=VALUE]... [FLAGS]`` loads an :class:`EvalConfig` from a YAML file with
dotted overrides, exactly as ``videorl train`` loads a :class:`~videorl.config.TrainConfig` (every
problem reported at once with its ``file:line``, unknown keys with suggestions); each of today's flags is
a shorthand for one key (:data:`FLAG_KEYS`). The visual budget keys are training's ``data.*`` keys, null
meaning the model family's, and resolve through the same :meth:`~videorl.config.DataConfig.visual_budget`,
so that a checkpoint is evaluated at the budget it was trained with and one frame cache serves both.
Relative paths in a config file are relative to the file's folder. docs/benchmarks.md lists every key.
"""

# ruff: noqa: RUF009 - option() returns dataclasses.field(...), with the help text in its metadata
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from videorl.config import DataConfig, Problems, load_config, option
from videorl.config.schema import ToolBudgets, names_a_file

if TYPE_CHECKING:
    from videorl.backend import VisualBudget

__all__ = ["FLAG_KEYS", "EvalConfig", "load_eval_config"]

#: the budget keys of ``data``: training's, resolved by its ``DataConfig.visual_budget``
_BUDGET_KEYS = ("video_fps", "video_max_frames", "video_min_pixels", "video_max_pixels", "video_total_pixels",
                "image_min_pixels", "image_max_pixels")  # fmt: skip


@dataclass
class EvalModelConfig:
    path: str = option(
        "",
        "A model directory (its config.json chooses the model backend), a Hub id (org/name) in the local "
        "Hugging Face cache, or a training run or one of its checkpoints (exported to OUTPUT_DIR/model "
        "first). Required.",
    )

    def _problems(self) -> Problems:
        return [] if self.path.strip() else [("path", "is required: the model to evaluate (--model)")]


@dataclass
class EvalDataConfig:
    cache_dir: str | None = option(
        None, "Frame cache, built on first use; null: OUTPUT_DIR/frame-cache. Share it between runs."
    )
    thinking: bool = option(False, "Ask for reasoning before the answer (the thinking prompt variant).")
    video_fps: float | None = option(None, "Frames sampled per second of video; null: the model family's.")
    video_max_frames: int | None = option(
        None, "Most frames sampled from one video; null: the model family's."
    )
    video_min_pixels: int | None = option(None, "Least pixels per video frame; null: the model family's.")
    video_max_pixels: int | None = option(None, "Most pixels per video frame; null: the model family's.")
    video_total_pixels: int | None = option(
        None, "Most pixels over all frames of one video; null: the model family's."
    )
    image_min_pixels: int | None = option(None, "Least pixels per image; null: the model family's.")
    image_max_pixels: int | None = option(None, "Most pixels per image; null: the model family's.")

    def _budget(self) -> DataConfig:
        """Training's data section holding these budget keys: its checks and resolution are the ones."""
        return DataConfig(train_files=["-"], **{key: getattr(self, key) for key in _BUDGET_KEYS})

    def _problems(self) -> Problems:
        return self._budget()._problems()

    def visual_budget(self, family: VisualBudget) -> VisualBudget:
        """``family`` (the backend's ``budget``) with the budget keys this section sets."""
        budget: VisualBudget = self._budget().visual_budget(family)
        return budget


@dataclass
class EvalSamplingConfig:
    max_tokens: int = option(1024, "Most tokens per response.")
    temperature: float = option(0.0, "Sampling temperature; 0: greedy.")
    seed: int = option(0, "Sampling seed (and the vLLM engine's).")

    def _problems(self) -> Problems:
        problems: Problems = []
        if self.max_tokens < 1:
            problems.append(("max_tokens", "must be >= 1"))
        if not self.temperature >= 0:
            problems.append(("temperature", "must be >= 0"))
        return problems


@dataclass
class EvalEngineConfig:
    name: str = option(
        "hf",
        "A registered rollout engine (videorl plugins): hf, transformers generate, batched; vllm, vLLM's "
        "AsyncLLM with chunked prefill; or a plugin's.",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = option(
        "auto", "auto: HF bfloat16 on GPU, float32 on CPU; vLLM the checkpoint's."
    )
    device: str | None = option(
        None, "Device of an engine without devices of its own (hf); null: cuda when available, else cpu."
    )
    max_model_len: int | None = option(
        None, "vLLM: context length; null: training's default prompt limit plus sampling.max_tokens."
    )
    max_num_batched_tokens: int = option(2048, "vLLM: tokens per scheduler step (chunked prefill).")

    def _problems(self) -> Problems:
        problems: Problems = []
        for key in ("max_model_len", "max_num_batched_tokens"):
            value = getattr(self, key)
            if value is not None and value < 1:
                problems.append((key, "must be >= 1"))
        return problems


@dataclass
class EvalRolloutConfig(ToolBudgets):
    """How a row is answered: one response (no workflow) or a registered rollout workflow, with
    training's tool budgets (:class:`~videorl.config.schema.ToolBudgets`)."""

    workflow: str | None = option(
        None,
        "Answer each row through this registered rollout workflow (tool_agent: turns that call "
        "rollout.tools; the final answer is scored) with the hf engine; null: one response per row.",
    )

    def _problems(self) -> Problems:
        problems = self._budget_problems()
        if self.tools and self.workflow is None:
            problems.append(("tools", "are offered by a workflow: set rollout.workflow (e.g. tool_agent)"))
        return problems


@dataclass
class EvalPipelineConfig:
    workers: int = option(2, "Loader threads (cached frames, prompt, encoding).")
    batch_size: int = option(8, "Most prompts per HF generate call.")
    batch_wait: float | None = option(
        None, "Seconds the HF engine may wait for a fuller batch once a prompt is ready; null: 0.5."
    )
    queue_size: int | None = option(
        None, "Most encoded prompts waiting or in flight; null: 2 × batch_size + workers."
    )

    def _problems(self) -> Problems:
        problems: Problems = []
        for key in ("workers", "batch_size", "queue_size"):
            value = getattr(self, key)
            if value is not None and value < 1:
                problems.append((key, "must be >= 1"))
        if self.batch_wait is not None and not self.batch_wait >= 0:
            problems.append(("batch_wait", "must be >= 0"))
        return problems


@dataclass
class EvalConfig:
    """Everything ``videorl eval run`` needs; the sections mirror training's where they mean the same."""

    #: keys holding paths: relative to the config file's folder when written there
    path_keys: ClassVar[tuple[str, ...]] = ("output_dir", "model.path", "data_root", "data.cache_dir")
    names_a_file = staticmethod(names_a_file)  # model.path may be a Hub id, as in training

    output_dir: str = option(
        "", "The run directory (resumed when it exists: samples already predicted are skipped). Required."
    )
    benchmarks: list[str] = option(
        factory=list,
        help="Registered benchmarks, NAME or NAME=DIR (DIR relative to data_root). Required.",
    )
    data_root: str | None = option(
        None, "The benchmark's directory, or a folder holding one directory per benchmark NAME."
    )
    limit: int | None = option(None, "Only the first N rows of each benchmark; null: all.")
    model: EvalModelConfig = option(factory=EvalModelConfig, help="The model.")
    data: EvalDataConfig = option(
        factory=EvalDataConfig, help="Frame cache, prompt variant and visual budget."
    )
    sampling: EvalSamplingConfig = option(factory=EvalSamplingConfig, help="Sampling.")
    engine: EvalEngineConfig = option(factory=EvalEngineConfig, help="The rollout engine.")
    rollout: EvalRolloutConfig = option(
        factory=EvalRolloutConfig, help="One response per row, or a workflow with tools (tool_agent)."
    )
    pipeline: EvalPipelineConfig = option(factory=EvalPipelineConfig, help="The evaluator's concurrency.")
    quiet: bool = option(False, "No progress bar.")
    loggers: list[str] = option(
        factory=list,
        help="Also log the summary to these registered loggers (wandb, mlflow, tensorboard, a plugin's).",
    )
    logger_options: dict[str, dict[str, Any]] = option(
        factory=dict, help="Options per logger, as trainer.logger_options (e.g. {wandb: {mode: offline}})."
    )

    def _problems(self) -> Problems:
        problems: Problems = []
        if not self.output_dir.strip():
            problems.append(("output_dir", "is required: the run directory (--out)"))
        if not self.benchmarks:
            problems.append(("benchmarks", "give at least one benchmark (--benchmark NAME[=DIR])"))
        if self.limit is not None and self.limit < 1:
            problems.append(("limit", "must be >= 1"))
        unknown = sorted(set(self.logger_options) - set(self.loggers))
        if unknown:
            problems.append(("logger_options", f"options for loggers not in loggers: {', '.join(unknown)}"))
        return problems


#: ``videorl eval run`` flag (its click parameter name) -> the key it sets
FLAG_KEYS = {
    "model": "model.path",
    "benchmarks": "benchmarks",
    "data_root": "data_root",
    "run_dir": "output_dir",
    "engine": "engine.name",
    "workflow": "rollout.workflow",
    "tools": "rollout.tools",
    "max_turns": "rollout.max_turns",
    "cache_dir": "data.cache_dir",
    "fps": "data.video_fps",
    "max_frames": "data.video_max_frames",
    "min_pixels": "data.video_min_pixels",
    "max_pixels": "data.video_max_pixels",
    "total_pixels": "data.video_total_pixels",
    "thinking": "data.thinking",
    "max_tokens": "sampling.max_tokens",
    "temperature": "sampling.temperature",
    "seed": "sampling.seed",
    "limit": "limit",
    "workers": "pipeline.workers",
    "batch_size": "pipeline.batch_size",
    "batch_wait": "pipeline.batch_wait",
    "queue_size": "pipeline.queue_size",
    "dtype": "engine.dtype",
    "device": "engine.device",
    "max_model_len": "engine.max_model_len",
    "max_num_batched_tokens": "engine.max_num_batched_tokens",
    "quiet": "quiet",
    "loggers": "loggers",
    "logger_options": "logger_options",
}


def load_eval_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> EvalConfig:
    """The evaluation config from a YAML file (or the defaults) with ``key=value`` overrides; a
    :class:`~videorl.errors.ConfigError` lists every problem."""
    config: EvalConfig = load_config(path, overrides, schema=EvalConfig)
    return config
