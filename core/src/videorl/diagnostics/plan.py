"""Memory per GPU and per node before launch: ``videorl plan CONFIG --gpus N --gpu-memory GB``.

The model is built on the ``meta`` device from its own ``config.json`` (no weight is read): its
parameters by FSDP unit (decoder layers, vision blocks, the vision tower's own and the root's), its
text and vision widths. A sequence is the longest prompt the visual budget gives, counted by the
backend (a video of ``video_max_frames`` frames of ``video_max_pixels`` square pixels), a question of
:data:`QUESTION_TOKENS` and a full response. The pieces are those of ``docs/multi-node.md``
("GPUs and memory for Qwen3-VL-8B"), in GB = 10⁹ bytes, estimates from tensor sizes:

- update phase: float32 master + gradient + AdamW states (16 B per parameter over the FSDP ranks),
  the bf16 weights gathered for compute (root unit, two decoder layers, the vision unit), the
  per-layer checkpoints of a micro-batch (``actor.max_tokens_per_micro_batch`` tokens) in the text
  model and of a video's patches in the vision tower (or every layer's activations without gradient
  checkpointing), the visual features, the response's logits (bf16) and one float32 chunk;
- rollout phase: vLLM's share of the GPU (``gpu_memory_utilization``): weights (bf16, split by tensor
  parallelism), working memory, the KV cache and how many tokens and groups it holds;
- host memory per node: the weight refresh (each rank's state dict in the engine's dtype and, for
  vLLM, its model folder in ``/dev/shm``) and the load (rank 0 reads the float32 model).

With sleep mode (vLLM on GPUs) the engine's share is free during the update; without it, it stays.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from videorl.errors import ConfigError
from videorl.generation import EngineCapabilities

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.config import TrainConfig

GB = 1e9
QUESTION_TOKENS = 200  # system prompt, question and options beside the video
OVERHEAD_GB = 4.0  # CUDA context, NCCL buffers, allocator slack
ENGINE_WORKING_GB = 6.0  # vLLM's forward at max_num_batched_tokens, its vision encoder, the sampler


@dataclass(frozen=True)
class ModelShape:
    """What the plan needs of a model: parameters by FSDP unit and the widths."""

    parameters: int
    vision_parameters: int
    decoder_layer: int  # parameters of one decoder layer
    vision_unit: int  # the vision tower without its blocks (its own FSDP unit)
    root: int  # everything outside the units (embeddings, LM head, final norm)
    layers: int
    hidden: int
    intermediate: int
    kv_heads: int
    head_dim: int
    vocab: int
    vision_depth: int
    vision_width: int
    deepstack: int  # vision feature maps added to the language model (Qwen3-VL), besides the last
    spatial_merge: int  # patches merged into one visual token, per side

    @classmethod
    def of(cls, model: Any) -> ModelShape:
        """From an HF vision-language model (on ``meta`` is enough)."""
        units = set(getattr(model, "_no_split_modules", None) or [])
        text_layers: list[Any] = []
        vision_blocks: list[Any] = []
        for name, module in model.named_modules():
            if type(module).__name__ in units:
                (vision_blocks if "visual" in name else text_layers).append(module)

        def count(module: Any) -> int:
            return sum(p.numel() for p in module.parameters())

        total = count(model)
        visual = next(
            (m for n, m in model.named_modules() if n.endswith("visual") and n.count(".") <= 1), None
        )
        vision = count(visual) if visual is not None else 0
        text = model.config.get_text_config()
        vcfg = getattr(model.config, "vision_config", None)
        heads = int(text.num_attention_heads)
        return cls(
            parameters=total,
            vision_parameters=vision,
            decoder_layer=count(text_layers[0]) if text_layers else 0,
            vision_unit=vision - sum([count(b) for b in vision_blocks]),
            root=total - vision - sum([count(layer) for layer in text_layers]),
            layers=int(text.num_hidden_layers),
            hidden=int(text.hidden_size),
            intermediate=int(text.intermediate_size),
            kv_heads=int(getattr(text, "num_key_value_heads", heads)),
            head_dim=int(getattr(text, "head_dim", None) or text.hidden_size // heads),
            vocab=int(text.vocab_size),
            vision_depth=int(getattr(vcfg, "depth", 0)),
            vision_width=int(getattr(vcfg, "hidden_size", 0)),
            deepstack=len(getattr(vcfg, "deepstack_visual_indexes", None) or []),
            spatial_merge=int(getattr(vcfg, "spatial_merge_size", 1)),
        )


@dataclass(frozen=True)
class Placement:
    gpus: int
    gpu_memory_gb: float
    nodes: int = 1

    def __post_init__(self) -> None:
        if self.gpus < 1 or self.nodes < 1 or self.gpus % self.nodes or self.gpu_memory_gb <= 0:
            raise ConfigError(
                f"plan: --gpus ({self.gpus}) must be a positive multiple of --nodes ({self.nodes}) and "
                f"--gpu-memory ({self.gpu_memory_gb}) positive"
            )


@dataclass
class Plan:
    """The figures (GB unless named otherwise) and what does not fit, with the setting that would."""

    sequence: dict[str, int]
    update: dict[str, float]
    rollout: dict[str, float]
    host_per_node: dict[str, float]
    findings: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return not self.findings


def _gb(n: float) -> float:
    return round(n / GB, 2)


def sequence_tokens(config: TrainConfig, backend: ModelBackend, visual_budget: Any) -> dict[str, int]:
    """The longest prompt of the budget (square frames, counted by the backend) and a full response."""
    import torch

    from videorl.backend import PromptInput
    from videorl.media.metadata import VideoMetadata
    from videorl.media.sizing import fit_to_budget

    frames = visual_budget.video_max_frames - visual_budget.video_max_frames % backend.temporal_patch_size
    side = int(visual_budget.video_max_pixels**0.5)
    h, w = fit_to_budget(
        side,
        side,
        factor=backend.factor,
        min_pixels=visual_budget.video_min_pixels,
        max_pixels=visual_budget.video_max_pixels,
    )
    fps = visual_budget.video_fps
    meta = VideoMetadata(
        source_fps=fps,
        total_frames=frames,
        duration=frames / fps,
        frame_indices=tuple(range(frames)),
        timestamps=tuple(i / fps for i in range(frames)),
        source_width=w,
        source_height=h,
        width=w,
        height=h,
    )
    video = torch.zeros((), dtype=torch.uint8).expand(frames, 3, h, w)
    prompt = backend.prompt_length(PromptInput("plan", "", videos=[(video, meta)])) + QUESTION_TOKENS
    visual = frames // backend.temporal_patch_size * (h // backend.factor) * (w // backend.factor)
    response = config.rollout.max_response_length
    return {"prompt": prompt, "visual": visual, "response": response, "sequence": prompt + response}


def plan(
    config: TrainConfig,
    shape: ModelShape,
    placement: Placement,
    seq: dict[str, int],
    engine: EngineCapabilities | None = None,
) -> Plan:
    """The memory plan of ``config`` on ``placement`` (see the module docstring) with the rollout engine
    that declares ``engine`` (None: vLLM's)."""
    options = config.rollout.engine_options
    tp = int(options.get("tensor_parallel_size", 1))
    utilization = float(options.get("gpu_memory_utilization", 0.6))
    sleep = bool(options.get("enable_sleep_mode", True))
    g, n, p = placement.gpu_memory_gb, placement.gpus, shape.parameters
    mb_tokens = max(config.actor.max_tokens_per_micro_batch, seq["sequence"])
    chunk = 1024

    update: dict[str, float] = {
        "states": _gb(16 * p / n),
        "gathered_weights": _gb(2 * (shape.root + 2 * shape.decoder_layer + shape.vision_unit)),
        "text_checkpoints": _gb(shape.layers * mb_tokens * shape.hidden * 2),
        "vision_checkpoints": _gb(
            shape.vision_depth * seq["visual"] * shape.spatial_merge**2 * shape.vision_width * 2
        ),
        "visual_features": _gb((1 + shape.deepstack) * seq["visual"] * shape.hidden * 2),
        "logits": _gb((seq["response"] + 1) * shape.vocab * 2 + 4 * chunk * shape.vocab * 4),
    }
    # without checkpointing every layer keeps its working set: q, k, v, attention out, two norms and
    # the residual (5 hidden + 2 KV widths), gate, up and the activation (3 FFN widths), in bf16
    per_token = 5 * shape.hidden + 2 * shape.kv_heads * shape.head_dim + 3 * shape.intermediate
    without = _gb(shape.layers * mb_tokens * per_token * 2)
    if not config.actor.gradient_checkpointing:
        update["text_activations"] = without
        del update["text_checkpoints"]
    if config.algorithm.use_kl_loss:
        update["reference_shard"] = _gb(2 * p / n)
    update["overhead"] = OVERHEAD_GB
    engine_share = round(utilization * g, 2)
    if not sleep:
        update["engine_awake"] = engine_share
    update["total"] = round(sum(update.values()), 2)
    update["text_activations_without_checkpointing"] = without

    weights = _gb(2 * p / tp)
    kv_per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * 2 / tp
    kv_gb = round(engine_share - weights - ENGINE_WORKING_GB, 2)
    group_tokens = seq["prompt"] + config.rollout.n * seq["response"]  # prompt shared by the group
    rollout: dict[str, float] = {
        "states": update["states"],
        "engine_share": engine_share,
        "engine_weights": weights,
        "engine_working": ENGINE_WORKING_GB,
        "kv_cache": kv_gb,
        "kv_tokens": float(int(max(kv_gb, 0) * GB / kv_per_token)),
        "groups_at_once": float(int(max(kv_gb, 0) * GB / (kv_per_token * group_tokens))),
        "overhead": OVERHEAD_GB,
    }
    if config.algorithm.use_kl_loss:
        rollout["reference_shard"] = update["reference_shard"]
    rollout["total"] = round(
        sum(v for k, v in rollout.items() if k in ("states", "engine_share", "overhead", "reference_shard")),
        2,
    )

    ranks_per_node = n // placement.nodes
    # each rank's gathered state dict, in the engine's dtype when it takes them so (vLLM), else in the
    # actor's float32 (the hf engine's own copy); with weight_sync folder a Hub-layout engine's are also
    # written to /dev/shm (in memory they go bucket by bucket through a staging buffer on the GPU)
    engine = engine or EngineCapabilities()
    in_engine_dtype = engine.weights_in_engine_dtype
    engine_bytes = 2 if in_engine_dtype and str(options.get("dtype", config.model.dtype)) != "float32" else 4
    copies = 2 if engine.weights_layout == "hub" and config.rollout.weight_sync == "folder" else 1
    host = {
        "weight_refresh": _gb(ranks_per_node * engine_bytes * p * copies),
        "load_rank0": _gb(4 * p),
    }

    findings = []
    if seq["prompt"] > config.data.max_prompt_length:
        findings.append(
            f"the budget's longest prompt ({seq['prompt']} tokens) exceeds data.max_prompt_length "
            f"({config.data.max_prompt_length}): raise it or lower data.video_max_pixels / video_max_frames"
        )
    if update["total"] > g:
        fixes = []
        if not sleep:
            fixes.append("rollout.engine_options.enable_sleep_mode=true (GPUs)")
        if not config.actor.gradient_checkpointing:
            fixes.append("actor.gradient_checkpointing=true")
        rest = update["total"] - update["states"]
        if rest < g:
            fixes.append(f"at least {int(-(-16 * p / GB // (g - rest)))} GPUs (the states shrink with more)")
        findings.append(
            f"update phase: {update['total']} GB per GPU > {g} GB; "
            + ("; ".join(fixes) or "a smaller micro-batch")
        )
    if kv_gb * GB < kv_per_token * seq["sequence"]:
        findings.append(
            f"rollout: the engine's KV cache ({kv_gb} GB) holds less than one sequence of {seq['sequence']} "
            "tokens: raise gpu_memory_utilization or tensor_parallel_size"
        )
    if rollout["total"] > g:
        room = (g - update["states"] - OVERHEAD_GB - rollout.get("reference_shard", 0.0)) / g
        findings.append(
            f"rollout phase: {rollout['total']} GB per GPU > {g} GB; "
            f"rollout.engine_options.gpu_memory_utilization <= {room:.2f}, or more GPUs"
        )
    return Plan(seq, update, rollout, host, findings)
