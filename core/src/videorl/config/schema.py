"""The training schema: typed, nested dataclasses with visible defaults and help texts.

Each section is a dataclass whose fields are declared with :func:`~videorl.option.option` (default plus
the help text that docs/training.md is generated from); a section may add ``_problems()`` for range and
cross-field checks, which the loader (:mod:`videorl.config.loader`) reports with every other problem.

The defaults: GRPO, DAPO clip-higher 0.2/0.28, KL off, n = 8, lr 1e-6
constant, AdamW (0.9, 0.999) with weight decay 0.01, gradient clip 1.0, 2 fps, 128 frames, 262,144
pixels per video frame, 1,048,576 per image, 4,096 response tokens. The run's own sections
(``trainer``, ``ray``) are in :mod:`videorl.config.run`.
"""

# ruff: noqa: RUF009 - option() returns dataclasses.field(...), with the help text in its metadata
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from videorl.config.run import RayConfig, TrainerConfig
from videorl.errors import ConfigError
from videorl.hub import is_hub_id, resolve_model
from videorl.option import Problems, option
from videorl.rewards.config import RewardConfig

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

    def _after_load(self) -> None:
        """``path`` given as a Hub id becomes its snapshot folder when the local cache holds it
        (:mod:`videorl.hub`); otherwise it stays as given (a config is checked, printed or planned on
        machines without the model), and loading the model says what to download."""

        if is_hub_id(self.path) and not Path(self.path).exists():
            with contextlib.suppress(ConfigError):
                self.path = str(resolve_model(self.path))

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
    prefetch: bool = option(
        True,
        "Decode and encode the next step's samples in a background thread while this step generates and "
        "updates (the same prompts as without; holds one more batch in host memory: its uint8 frames and "
        "uint8 pixel patches, normalised on the device).",
    )
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
class ToolBudgets:
    """The tool_agent workflow's tools and budgets: the same keys, meanings and checks in training's
    ``rollout`` section and in evaluation's (where an episode is a benchmark row)."""

    tools: list[str] = option(
        factory=list,
        help="Tools the tool_agent workflow offers (registered tools; built in: get_frames, seek, zoom).",
    )
    max_turns: int = option(4, "tool_agent: most policy turns per episode (a call in the last is not run).")
    max_frames_per_call: int = option(16, "tool_agent: most frames one tool call may return.")
    max_visual_tokens: int | None = option(
        None, "tool_agent: most visual tokens the tool replies of an episode may add; null: no limit."
    )

    def _budget_problems(self) -> Problems:
        problems: Problems = []
        for key in ("max_turns", "max_frames_per_call"):
            if getattr(self, key) < 1:
                problems.append((key, "must be >= 1"))
        if self.max_visual_tokens is not None and self.max_visual_tokens < 1:
            problems.append(("max_visual_tokens", "must be >= 1 (or null: no limit)"))
        return problems


@dataclass
class RolloutConfig(ToolBudgets):
    engine: str = option("vllm", "Rollout engine (a registered engine: vllm or hf).")
    workflow: str = option(
        "single_turn",
        "How a prompt becomes the episodes of its group (a registered rollout workflow; built in: "
        "single_turn, one response per episode; tool_agent, turns that call rollout.tools).",
    )
    tool_frames: Literal["prompt", "decode"] = option(
        "prompt",
        "tool_agent: where get_frames takes a window's frames: prompt, the frames the prompt's video was "
        "decoded to (no more than the prompt shows); decode, the window decoded afresh at the data.video_* "
        "budget and cached (needs data.source_mode prefer_preprocessed or realtime_only).",
    )
    n: int = option(8, "Responses sampled per prompt (the GRPO group size).")
    temperature: float = option(1.0, "Sampling temperature.")
    top_p: float = option(1.0, "Nucleus sampling probability mass.")
    top_k: int = option(-1, "Sample among the k most likely tokens; -1: all.")
    max_response_length: int = option(4096, "Most tokens generated per response.")
    enable_mix_policy: bool = option(
        False,
        "Put the sample's offline trajectory in the last of the n slots of its group (mix-policy). The "
        "offline responses score under offline/reward and offline/accuracy, never in reward/* or accuracy/*.",
    )
    mix_policy_accuracy_threshold: float | None = option(
        None,
        "With mix-policy: replace the last slot only when the group's online accuracy is below this "
        "value; null: always (when the sample has an offline trajectory).",
    )
    engine_options: dict[str, Any] = option(
        factory=dict,
        help="Keyword options passed to the engine (vllm: any field of vLLM's EngineArgs, e.g. "
        "gpu_memory_utilization, tensor_parallel_size, max_num_seqs, enable_prefix_caching).",
    )
    weight_sync: Literal["memory", "folder"] = option(
        "memory",
        "How vLLM gets the actor's weights each step: memory pushes them in buckets into the model's "
        "load_weights (CUDA IPC on GPUs); folder writes a model folder to /dev/shm that vLLM reloads.",
    )
    weight_bucket_mb: int = option(
        512, "With weight_sync memory: MiB of weights per bucket (host or GPU staging memory per push)."
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
        problems += self._budget_problems()
        if self.weight_bucket_mb < 1:
            problems.append(("weight_bucket_mb", "must be >= 1"))
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
        "reinforce_pp, reinforce_pp_baseline, gdpo, gmpo, sapo; see docs/algorithms.md): sets the keys below "
        "that you leave at their default.",
    )
    adv_estimator: str = option(
        "grpo", "A registered advantage estimator (grpo, rloo, remax, reinforce_pp, gdpo)."
    )
    estimator_options: dict[str, Any] = option(
        factory=dict,
        help="Options of the advantage estimator (the run's config.yaml lists them all, resolved).",
    )
    policy_loss: str = option("ppo_clip", "A registered policy loss (ppo_clip, gspo, cispo, gmpo, sapo).")
    loss_options: dict[str, Any] = option(
        factory=dict, help="Options of the policy loss (the run's config.yaml lists them all, resolved)."
    )
    norm_adv_by_std: bool = option(
        True, "Divide by the group's standard deviation (false: subtract the mean only, as in Dr. GRPO)."
    )
    adv_eps: float = option(1e-6, "Added to the group standard deviation.")
    clip_low: float = option(0.2, "PPO ratio clip below: 1 - clip_low (DAPO ε_low).")
    clip_high: float = option(0.28, "PPO ratio clip above: 1 + clip_high (DAPO clip-higher ε_high).")
    loss_agg_mode: Literal[
        "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
    ] = option(
        "token-mean",
        "token-mean: every valid token weighs the same; seq-mean-token-mean: mean per response, then "
        "over responses; seq-mean-token-sum: sum per response, then the mean over responses; "
        "seq-mean-token-sum-norm (Dr. GRPO): the sum over responses × rollout.max_response_length.",
    )
    use_kl_loss: bool = option(False, "Add a KL penalty to a frozen reference model (algorithm.kl_penalty).")
    kl_penalty: Literal["low_var_kl", "k3", "kl", "k1", "abs", "mse", "k2"] = option(
        "low_var_kl",
        "The per-token KL estimator: low_var_kl (k3: exp(d) - d - 1, d = ref - logp), kl (k1: logp - ref), "
        "abs (|logp - ref|), mse (k2: (logp - ref)²/2). Reduced as the policy loss's loss_agg_mode.",
    )
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


#: The linear layers of a Qwen-VL-class language model that get adapters by default: attention and MLP
#: projections of every decoder layer (the vision tower's are chosen by ``vision_tower``).
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class LoraConfig:
    """``actor.lora``: train low-rank adapters (peft) instead of every weight (:mod:`videorl.actor.lora`)."""

    enabled: bool = option(
        False,
        "Train LoRA adapters only (optimizer states for them only); the reference model of the KL penalty "
        "is the same module with its adapters off, and checkpoints hold the adapters.",
    )
    rank: int = option(16, "Rank r of each adapter (B·A with A r×in, B out×r).")
    alpha: float = option(32.0, "Adapter scale numerator: the update is (alpha / rank)·B·A.")
    dropout: float = option(0.0, "Dropout on the adapters' input (0: none; > 0 draws from the torch RNG).")
    use_rslora: bool = option(False, "Rank-stabilised scale alpha / sqrt(rank) instead of alpha / rank.")
    target_modules: list[str] = option(
        factory=lambda: list(LORA_TARGETS),
        help="Linear layers of the language model that get adapters, by the last part of their module name "
        "(every decoder layer's); a name that matches none is an error listing those that exist.",
    )
    vision_tower: Literal["frozen", "adapted"] = option(
        "frozen",
        "frozen: the vision tower (and its merger into the language model) keeps its weights; adapted: "
        "every linear layer in it gets an adapter too.",
    )

    def _problems(self) -> Problems:
        problems: Problems = []
        if self.rank < 1:
            problems.append(("rank", "must be >= 1"))
        if not self.alpha > 0:
            problems.append(("alpha", "must be > 0"))
        if not 0 <= self.dropout < 1:
            problems.append(("dropout", "must lie in [0, 1)"))
        if not self.target_modules or not all(name.strip() for name in self.target_modules):
            problems.append(("target_modules", "must name at least one linear layer (e.g. q_proj)"))
        elif any("." in name or "*" in name for name in self.target_modules):
            problems.append(
                ("target_modules", "takes the last part of module names (q_proj), not paths or patterns")
            )
        return problems


@dataclass
class ActorConfig:
    global_batch_size: int = option(
        256,
        "Prompts per optimizer step (with their n responses); data.rollout_batch_size / this = updates per "
        "step.",
    )
    max_tokens_per_micro_batch: int = option(
        24096,
        "Token budget of one micro-batch (dynamic batching); a longer sequence gets a micro-batch of its "
        "own.",
    )
    gradient_checkpointing: bool = option(True, "Recompute activations in the backward pass to save memory.")
    padding_free: bool = option(
        True,
        "Pack each micro-batch's sequences into one row (per-sequence positions and attention boundaries) "
        "instead of padding them to the longest; families that cannot pack are padded (logged once).",
    )
    lora: LoraConfig = option(factory=LoraConfig, help="LoRA adapters (peft) instead of full fine-tuning.")
    sequence_parallel_size: int = option(
        1,
        "Ranks that share each sample and hold 1/k of every packed sequence (DeepSpeed-Ulysses); must "
        "divide the number of training processes and the language model's attention heads (1: off).",
    )

    def _problems(self) -> Problems:
        problems: Problems = []
        if self.global_batch_size < 1:
            problems.append(("global_batch_size", "must be >= 1"))
        if self.sequence_parallel_size < 1:
            problems.append(("sequence_parallel_size", "must be >= 1"))
        if self.max_tokens_per_micro_batch < 1:
            problems.append(("max_tokens_per_micro_batch", "must be >= 1"))
        return problems


def names_a_file(key: str, value: str, base: Path) -> bool:
    """Whether ``value`` of the path key ``key`` names a file or folder (not a registered template,
    ``auto``, a module or a Hub id); how the training and evaluation schemas tell them apart."""
    if key == "data.prompt_template":
        return value.endswith(".jinja") or (base / value).is_file()
    if key == "trainer.resume":
        return value != "auto"
    if key == "plugins":
        return value.endswith(".py")
    if key == "model.path":  # a Hub id (org/name) unless such a folder is there
        return not is_hub_id(value) or (base / value).exists()
    return True


@dataclass
class TrainConfig:
    """Everything ``videorl train`` reads: one section per part of the system."""

    #: keys holding paths (or lists of them): a relative path written in a config file is relative to
    #: the file's folder; one given as an override or left at its default, to the working directory
    path_keys: ClassVar[tuple[str, ...]] = (
        "output_dir",
        "model.path",
        "data.train_files",
        "data.val_files",
        "data.media_root",
        "data.cache_dir",
        "data.prompt_template",
        "trainer.resume",
        "trainer.benchmarks[].data_root",
        "plugins",
    )
    names_a_file = staticmethod(names_a_file)

    seed: int = option(1, "Seed of every random generator (python, numpy, torch, data order, sampling).")
    plugins: list[str] = option(
        factory=list,
        help="Plugin modules loaded for this run, before anything is validated: import paths "
        "(my_pkg.rewards) "
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
        if self.ray.benchmark_workers and not self.trainer.benchmarks:
            problems.append(
                ("ray.benchmark_workers", "needs trainer.benchmarks (without them it has nothing to score)")
            )
        if self.trainer.max_staleness > 0:
            if self.ray.placement != "split":
                problems.append(
                    ("trainer.max_staleness", "needs ray.placement: split (rollout workers of their own)")
                )
            if self.algorithm.rollout_correction == "none":
                problems.append(
                    (
                        "trainer.max_staleness",
                        "needs algorithm.rollout_correction: tis or mis (the correction for the behaviour "
                        "policy that generated a stale batch)",
                    )
                )
        return problems
