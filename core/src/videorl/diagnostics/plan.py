"""Memory per GPU and per node before launch: ``videorl plan CONFIG --gpus N --gpu-memory GB``.

The model is built on the ``meta`` device from its own ``config.json`` (no weight is read; a bare
``config.json``, or a public shape of :mod:`videorl.diagnostics.shapes`, is enough): its parameters
by FSDP unit (decoder layers, vision blocks, the vision tower's own and the root's), its text and
vision widths. A sequence is the longest prompt the visual budget gives, counted by the backend (a
video of ``video_max_frames`` frames of ``video_max_pixels`` square pixels), a question of
:data:`QUESTION_TOKENS` and a full response. The pieces are those of ``docs/multi-node.md`` ("GPUs
and memory for Qwen3-VL-8B"), in GB = 10⁹ bytes, estimates from tensor sizes, summed as if they
met (they mostly do at the first micro-batch's backward), so a plan errs on the side of room:

- update phase: float32 master + gradient + AdamW states (16 B per parameter over the FSDP ranks),
  the bf16 weights gathered for compute (root unit, two decoder layers, the vision unit), FSDP2's
  unsharded gradients (the root's and one layer's, bf16 and their float32 reduce-scatter copy), the
  per-layer checkpoints of a micro-batch in the text model and of a video's patches in the vision
  tower, the working set of the layer being recomputed, the visual features, the response
  positions' logits and their gradient (bf16) and the float32 chunks, and, colocated, what a
  sleeping engine keeps (or all of its share without sleep mode);
- rollout phase: vLLM's share of the GPU (``gpu_memory_utilization``): weights (bf16, split by tensor
  parallelism), working memory, the KV cache and how many tokens and groups it holds; colocated, the
  actor's states stay beside it;
- host memory per node: the prompts held (the step's batch and, with ``data.prefetch``, the next:
  uint8 frames and float32 pixels), the weight refresh, the staging of an asynchronous sharded
  checkpoint, the engines' front-end processes and the load (rank 0 reads the float32 model).

Sequence parallelism (``actor.sequence_parallel_size`` k): each rank holds ``1/k`` of a micro-batch's
tokens through the decoder layers, so the text checkpoints and a decoder layer's working set shrink by
``k``; a family whose backend shards the vision tower by temporal patches
(:func:`~videorl.backend.shards_vision_tower`) encodes ``1/k`` of the patches on each rank, so the
vision checkpoints and a vision block's working set shrink by ``k`` too; otherwise the tower runs
whole on every rank. The visual features (all-gathered: every rank merges the whole row) and the
response positions' logits do not shrink, and ``k`` must divide the attention heads (Ulysses). The
plan also gives the longest video, in frames at the budget's pixels per frame, whose update fits a GPU
and whose sequence fits the engine's KV cache.

Placement: colocated (FSDP over every GPU, an engine of ``tensor_parallel_size`` GPUs on the same
GPUs), or split (``ray.placement: split``: ``ray.actor_workers`` FSDP ranks, ``ray.rollout_workers``
engines of ``ray.rollout_gpus_per_worker`` GPUs each, on GPUs of their own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from videorl.backend import shards_vision_tower
from videorl.errors import ConfigError
from videorl.generation import EngineCapabilities
from videorl.rollout.vllm_common import DEFAULT_GPU_MEMORY_UTILIZATION

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.config import TrainConfig

GB = 1e9
QUESTION_TOKENS = 200  # system prompt, question and options beside the video
#: the text around each temporal group of a video when no tokenizer is at hand (a bare config.json):
#: Qwen3-VL's ``<t seconds>``, vision start and end take about 8; Qwen2/2.5-VL 2 per video (so more room)
FRAMING_TOKENS_PER_GROUP = 8
OVERHEAD_GB = 4.0  # CUDA context, NCCL buffers, allocator slack
ENGINE_WORKING_GB = 6.0  # vLLM's forward at max_num_batched_tokens, its vision encoder, the sampler
#: what a sleeping colocated engine keeps on its GPU: its processes' CUDA contexts, NCCL buffers, the
#: CUDA graphs' pool and allocator blocks outside vLLM's sleep allocator
ENGINE_ASLEEP_GB = 2.0
#: host memory of one vLLM engine's processes beside the weights: front-end and engine core each
#: keep a multimodal processor cache (``mm_processor_cache_gb``, 4 GiB by default), plus the
#: processes' own memory (torch, CUDA, the tokenizer and processor)
ENGINE_HOST_GB = 12.0
CHUNK = 1024  # positions per float32 log-softmax chunk (videorl.model_inputs)


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
    vision_intermediate: int
    heads: int  # the language model's attention heads (Ulysses splits them)
    deepstack: int  # vision feature maps added to the language model (Qwen3-VL), besides the last
    spatial_merge: int  # patches merged into one visual token, per side
    patch: int = 14  # pixels per patch side
    temporal_patch: int = 2  # frames per patch
    #: sequence parallelism shards the vision tower by temporal patches (the backend's hook)
    shards_tower: bool = False

    @classmethod
    def of(cls, model: Any, backend: object = None) -> ModelShape:
        """From an HF vision-language model (on ``meta`` is enough) and its backend (None: one that
        does not shard the vision tower)."""
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
            vision_intermediate=int(getattr(vcfg, "intermediate_size", 0)),
            heads=heads,
            deepstack=len(getattr(vcfg, "deepstack_visual_indexes", None) or []),
            spatial_merge=int(getattr(vcfg, "spatial_merge_size", 1)),
            patch=int(getattr(vcfg, "patch_size", 14)),
            temporal_patch=int(getattr(vcfg, "temporal_patch_size", 2)),
            shards_tower=backend is not None and shards_vision_tower(backend),
        )


@dataclass(frozen=True)
class Placement:
    """The machines: ``gpus`` of ``gpu_memory_gb`` each over ``nodes``, and (optional) each node's
    host memory in GB."""

    gpus: int
    gpu_memory_gb: float
    nodes: int = 1
    host_memory_gb: float | None = None

    def __post_init__(self) -> None:
        if self.gpus < 1 or self.nodes < 1 or self.gpus % self.nodes or self.gpu_memory_gb <= 0:
            raise ConfigError(
                f"plan: --gpus ({self.gpus}) must be a positive multiple of --nodes ({self.nodes}) and "
                f"--gpu-memory ({self.gpu_memory_gb}) positive"
            )

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes


@dataclass(frozen=True)
class Layout:
    """Where a run's actor ranks and engines sit: ``actor_gpus`` FSDP ranks, ``engines`` engines of
    ``engine_gpus`` GPUs (tensor parallelism ``tp``), on the same GPUs or (``split``) on their own."""

    split: bool
    actor_gpus: int
    engines: int
    engine_gpus: int
    tp: int

    @classmethod
    def of(cls, config: TrainConfig, placement: Placement) -> Layout:
        tp = int(config.rollout.engine_options.get("tensor_parallel_size", 1))
        r = config.ray
        if r.placement != "split":
            return cls(False, placement.gpus, max(placement.gpus // tp, 1), tp, tp)
        per_worker = int(r.gpus_per_worker or 1)
        rollout_gpus = int(r.rollout_gpus_per_worker or per_worker)
        # null: one per data group, as the Ray runtime starts them (videorl.cluster.groups)
        groups = max(1, r.actor_workers // config.actor.sequence_parallel_size)
        engines = r.rollout_workers if r.rollout_workers is not None else groups
        return cls(True, r.actor_workers * per_worker, engines, rollout_gpus, tp)

    @property
    def gpus(self) -> int:
        return self.actor_gpus + (self.engines * self.engine_gpus if self.split else 0)


@dataclass
class Plan:
    """The figures (GB unless named otherwise) and what does not fit, with the setting that would."""

    sequence: dict[str, int]
    update: dict[str, float]
    rollout: dict[str, float]
    host_per_node: dict[str, float]
    layout: Layout | None = None
    #: the longest video whose update fits a GPU and whose sequence the KV cache holds (0: none)
    longest: dict[str, int] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return not self.findings


def _gb(n: float) -> float:
    return round(n / GB, 2)


def _floor2(x: float) -> float:
    """``x`` rounded down to 2 decimals: advice of an upper limit that still fits once printed."""
    return math.floor(x * 100 + 1e-9) / 100


def sequence_tokens(config: TrainConfig, backend: ModelBackend, visual_budget: Any) -> dict[str, int]:
    """The longest prompt of the budget (square frames, counted by the backend) and a full response.

    Without a tokenizer (a bare ``config.json``) the prompt is the visual tokens, the framing of
    :data:`FRAMING_TOKENS_PER_GROUP` per temporal group and the question (``estimated``: 1)."""
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
    groups = frames // backend.temporal_patch_size
    visual = groups * (h // backend.factor) * (w // backend.factor)
    video = torch.zeros((), dtype=torch.uint8).expand(frames, 3, h, w)
    estimated = 0
    try:
        prompt = backend.prompt_length(PromptInput("plan", "", videos=[(video, meta)])) + QUESTION_TOKENS
    except (OSError, ValueError):  # no tokenizer or processor files beside config.json
        prompt, estimated = visual + FRAMING_TOKENS_PER_GROUP * groups + QUESTION_TOKENS, 1
    response = config.rollout.max_response_length
    return {
        "prompt": prompt,
        "visual": visual,
        "response": response,
        "sequence": prompt + response,
        "frames": frames,
        "frame_pixels": h * w,
        "estimated": estimated,
    }


def plan(
    config: TrainConfig,
    shape: ModelShape,
    placement: Placement,
    seq: dict[str, int],
    engine: EngineCapabilities | None = None,
) -> Plan:
    """The memory plan of ``config`` on ``placement`` (see the module docstring) with the rollout engine
    that declares ``engine`` (None: vLLM's)."""
    layout = Layout.of(config, placement)
    update = update_phase(config, shape, placement, layout, seq)
    rollout = rollout_phase(config, shape, placement, layout, seq, update)
    host = host_memory(config, shape, placement, layout, seq, engine or EngineCapabilities())
    result = Plan(seq, update, rollout, host, layout, longest_video(config, shape, placement, layout, seq))
    result.findings = findings(config, shape, placement, layout, result)
    return result


def scaled_sequence(seq: dict[str, int], groups: int, temporal_patch: int) -> dict[str, int]:
    """``seq`` with a video of ``groups`` temporal groups at the same pixels per frame: the visual
    tokens and the framing around them grow with the groups, the question does not."""
    base = max(seq["frames"] // temporal_patch, 1)
    visual = seq["visual"] * groups // base
    prompt = QUESTION_TOKENS + (seq["prompt"] - QUESTION_TOKENS) * groups // base
    frames = groups * temporal_patch
    return {**seq, "frames": frames, "visual": visual, "prompt": prompt, "sequence": prompt + seq["response"]}


def longest_video(
    config: TrainConfig, shape: ModelShape, placement: Placement, layout: Layout, seq: dict[str, int]
) -> dict[str, int]:
    """The most frames (at ``seq``'s pixels per frame) whose update fits a GPU and whose sequence the
    engine's KV cache holds: a bisection over temporal groups (both grow with the frames)."""
    kv_bytes = 2 * shape.layers * shape.kv_heads * shape.head_dim * 2 / layout.tp
    utilization = float(
        config.rollout.engine_options.get("gpu_memory_utilization", DEFAULT_GPU_MEMORY_UTILIZATION)
    )
    kv_room = (
        utilization * placement.gpu_memory_gb - 2 * shape.parameters / layout.tp / GB - ENGINE_WORKING_GB
    ) * GB

    def fits(groups: int) -> bool:
        at = scaled_sequence(seq, groups, shape.temporal_patch)
        update = update_phase(config, shape, placement, layout, at)
        return update["total"] <= placement.gpu_memory_gb and kv_bytes * at["sequence"] <= kv_room

    low, high = 0, 1
    while fits(high) and high < 1 << 24:  # 33 M frames: beyond any video
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    at = scaled_sequence(seq, low, shape.temporal_patch)
    return {"frames": at["frames"], "visual": at["visual"], "sequence": at["sequence"] if low else 0}


def _layer_working_set(shape: ModelShape, tokens: int, patches: int) -> tuple[int, int]:
    """Bytes of one decoder layer's activations over ``tokens`` (q, k, v, attention out, two norms
    and the residual: 5 hidden + 2 KV widths; gate, up and the activation: 3 FFN widths) and of one
    vision block's over ``patches`` (qkv, attention out, two norms, the residual: 7 widths; fc1 and
    its activation: 2 FFN widths), in bf16."""
    text = 5 * shape.hidden + 2 * shape.kv_heads * shape.head_dim + 3 * shape.intermediate
    vision = 7 * shape.vision_width + 2 * shape.vision_intermediate
    return 2 * tokens * text, 2 * patches * vision


def update_phase(
    config: TrainConfig,
    shape: ModelShape,
    placement: Placement,
    layout: Layout,
    seq: dict[str, int],
    sp_size: int | None = None,
) -> dict[str, float]:
    """The update's figures per actor GPU (see the module docstring); ``sp_size``: the
    sequence-parallel size (None: ``actor.sequence_parallel_size``)."""
    options = config.rollout.engine_options
    p = shape.parameters
    k = sp_size or config.actor.sequence_parallel_size
    budget = config.actor.max_tokens_per_micro_batch
    mb_tokens = -(-max(budget, seq["sequence"]) // k)  # this rank's part of the micro-batch
    per_mb = max(1, budget // seq["sequence"])  # sequences packed into one micro-batch
    patches = seq["visual"] * shape.spatial_merge**2  # the whole video on every rank of a group,
    if shape.shards_tower:  # or this rank's share of its temporal patches
        patches = -(-patches // k)
    text_layer, vision_block = _layer_working_set(shape, mb_tokens, patches)
    update: dict[str, float] = {
        "states": _gb(16 * p / layout.actor_gpus),
        "gathered_weights": _gb(2 * (shape.root + 2 * shape.decoder_layer + shape.vision_unit)),
        # bf16 gradients of the root (held through the backward) and of one layer, cast to float32
        # for their reduce-scatter (FSDP2's reduce_dtype)
        "unsharded_gradients": _gb(6 * (shape.root + shape.decoder_layer)),
        "text_checkpoints": _gb(shape.layers * mb_tokens * shape.hidden * 2),
        "recomputed_layer": _gb(max(text_layer, vision_block)),
        "vision_checkpoints": _gb(shape.vision_depth * patches * shape.vision_width * 2),
        "visual_features": _gb((1 + shape.deepstack) * seq["visual"] * shape.hidden * 2),
        # the response positions' logits and their gradient in bf16, log-softmax in float32 chunks
        "logits": _gb(2 * per_mb * (seq["response"] + 1) * shape.vocab * 2 + 4 * CHUNK * shape.vocab * 4),
    }
    without = _gb(shape.layers * text_layer)
    if not config.actor.gradient_checkpointing:
        update["text_activations"] = without
        del update["text_checkpoints"], update["recomputed_layer"]
    if config.algorithm.use_kl_loss:
        update["reference_shard"] = _gb(2 * p / layout.actor_gpus)
    update["overhead"] = OVERHEAD_GB
    if not layout.split:
        if bool(options.get("enable_sleep_mode", True)):
            update["engine_asleep"] = ENGINE_ASLEEP_GB
        else:
            utilization = float(options.get("gpu_memory_utilization", DEFAULT_GPU_MEMORY_UTILIZATION))
            update["engine_awake"] = round(utilization * placement.gpu_memory_gb, 2)
    update["total"] = round(sum(update.values()), 2)
    update["text_activations_without_checkpointing"] = without
    return update


def rollout_phase(
    config: TrainConfig,
    shape: ModelShape,
    placement: Placement,
    layout: Layout,
    seq: dict[str, int],
    update: dict[str, float],
) -> dict[str, float]:
    """The rollout's figures per engine GPU: the engine's share and its KV cache, and colocated the
    actor's states beside it."""
    options = config.rollout.engine_options
    utilization = float(options.get("gpu_memory_utilization", DEFAULT_GPU_MEMORY_UTILIZATION))
    engine_share = round(utilization * placement.gpu_memory_gb, 2)
    weights = _gb(2 * shape.parameters / layout.tp)
    kv_per_token = 2 * shape.layers * shape.kv_heads * shape.head_dim * 2 / layout.tp
    kv_gb = round(engine_share - weights - ENGINE_WORKING_GB, 2)
    group_tokens = seq["prompt"] + config.rollout.n * seq["response"]  # prompt shared by the group
    rollout: dict[str, float] = {}
    if not layout.split:
        rollout["states"] = update["states"]
    rollout |= {
        "engine_share": engine_share,
        "engine_weights": weights,
        "engine_working": ENGINE_WORKING_GB,
        "kv_cache": kv_gb,
        "kv_bytes_per_token": kv_per_token,
        "kv_tokens": float(int(max(kv_gb, 0) * GB / kv_per_token)),
        "groups_at_once": float(int(max(kv_gb, 0) * GB / (kv_per_token * group_tokens))),
    }
    if not layout.split:
        rollout["overhead"] = OVERHEAD_GB
        if config.algorithm.use_kl_loss:
            rollout["reference_shard"] = update["reference_shard"]
    counted = ("states", "engine_share", "overhead", "reference_shard")
    rollout["total"] = round(sum(v for k, v in rollout.items() if k in counted), 2)
    return rollout


def _prompt_bytes(shape: ModelShape, seq: dict[str, int]) -> int:
    """Host bytes of one encoded video prompt: its uint8 frames and its uint8 pixel patches (normalised
    to float on the device: :class:`~videorl.model_inputs.PixelNorm`)."""
    frames = seq["frames"] * 3 * seq["frame_pixels"]
    pixels = seq["visual"] * shape.spatial_merge**2 * 3 * shape.temporal_patch * shape.patch**2
    return frames + pixels


def host_memory(
    config: TrainConfig,
    shape: ModelShape,
    placement: Placement,
    layout: Layout,
    seq: dict[str, int],
    engine: EngineCapabilities,
) -> dict[str, float]:
    """Host memory per node: of an actor node (colocated: every node), and split of a rollout node."""
    options = config.rollout.engine_options
    p, per_node = shape.parameters, placement.gpus_per_node
    # the refresh's gathered state dict: in the engine's dtype where it takes them so (vLLM), else the
    # actor's float32 (the hf engine's own copy); with weight_sync folder a Hub-layout engine's are also
    # written to /dev/shm
    in_engine_dtype = engine.weights_in_engine_dtype
    engine_bytes = 2 if in_engine_dtype and str(options.get("dtype", config.model.dtype)) != "float32" else 4
    copies = 2 if engine.weights_layout == "hub" and config.rollout.weight_sync == "folder" else 1
    held = 2 if config.data.prefetch else 1  # the step's batch, and the next one being prepared
    ranks = min(per_node, layout.actor_gpus)
    # every rank of a sequence-parallel group holds its data group's prompts (the first rank's
    # rollout, received); only the first prepares the next batch
    k = config.actor.sequence_parallel_size
    prompts_per_rank = math.ceil(config.data.rollout_batch_size / max(layout.actor_gpus // k, 1))
    holders = ranks + (held - 1) * math.ceil(ranks / k)
    host = {
        "prompts": _gb(holders * prompts_per_rank * _prompt_bytes(shape, seq)),
        "weight_refresh": _gb(ranks * engine_bytes * p * copies),
        "checkpoint_staging": _gb(ranks * 12 * p / layout.actor_gpus),  # master, Adam m and v
        "engine_front_ends": round((ranks // layout.tp if not layout.split else 0) * ENGINE_HOST_GB, 2),
        "load_rank0": _gb(4 * p),
    }
    host["total"] = round(sum(host.values()), 2)
    if layout.split:
        engines = max(per_node // layout.engine_gpus, 1)
        prompts_per_engine = math.ceil(config.data.rollout_batch_size / layout.engines)
        host["rollout_node_prompts"] = _gb(engines * held * prompts_per_engine * _prompt_bytes(shape, seq))
        host["rollout_node_weights"] = _gb(engines * engine_bytes * p * copies)  # received, then loaded
        host["rollout_node_engines"] = round(engines * ENGINE_HOST_GB, 2)
        host["rollout_node_total"] = round(
            host["rollout_node_prompts"] + host["rollout_node_weights"] + host["rollout_node_engines"], 2
        )
    return host


def findings(
    config: TrainConfig, shape: ModelShape, placement: Placement, layout: Layout, result: Plan
) -> list[str]:
    """What does not fit, each with the setting that would (upper limits rounded down, counts up)."""
    g, seq, update, rollout = placement.gpu_memory_gb, result.sequence, result.update, result.rollout
    options = config.rollout.engine_options
    out = []
    if layout.split and layout.gpus > placement.gpus:
        out.append(
            f"split placement needs {layout.actor_gpus} actor + {layout.engines} x {layout.engine_gpus} "
            f"engine GPUs = {layout.gpus} > --gpus {placement.gpus}"
        )
    if layout.split and layout.engine_gpus < layout.tp:
        out.append(
            f"an engine of tensor_parallel_size {layout.tp} needs ray.rollout_gpus_per_worker >= {layout.tp}"
        )
    if seq["prompt"] > config.data.max_prompt_length:
        out.append(
            f"the budget's longest prompt ({seq['prompt']} tokens) exceeds data.max_prompt_length "
            f"({config.data.max_prompt_length}): raise it or lower data.video_max_pixels / video_max_frames"
        )
    out += _sequence_parallel_findings(config, shape, layout)
    if update["total"] > g:
        out.append(
            f"update phase: {update['total']} GB per GPU > {g} GB; "
            + ("; ".join(_update_fixes(config, shape, placement, layout, result)) or "a smaller micro-batch")
        )
    kv_per_token = rollout["kv_bytes_per_token"]
    if rollout["kv_cache"] * GB < kv_per_token * seq["sequence"]:
        out.append(
            f"rollout: the engine's KV cache ({rollout['kv_cache']} GB) holds less than one sequence of "
            f"{seq['sequence']} tokens: raise gpu_memory_utilization or tensor_parallel_size"
        )
    if rollout["total"] > g:
        beside = (
            rollout.get("states", 0.0) + rollout.get("overhead", 0.0) + rollout.get("reference_shard", 0.0)
        )
        room = _floor2((g - beside) / g)
        out.append(
            f"rollout phase: {rollout['total']} GB per GPU > {g} GB; "
            f"rollout.engine_options.gpu_memory_utilization <= {room:.2f}, or more GPUs"
        )
    if float(options.get("gpu_memory_utilization", 0.6)) > 1:
        out.append("rollout.engine_options.gpu_memory_utilization must be at most 1")
    host = placement.host_memory_gb
    for key in ("total", "rollout_node_total"):
        if host is not None and key in result.host_per_node and result.host_per_node[key] > host:
            node = "a rollout node" if key == "rollout_node_total" else "a node"
            out.append(
                f"host memory: {result.host_per_node[key]} GB on {node} > {host} GB; data.prefetch=false, "
                "fewer ranks per node, or rollout.weight_sync=memory"
            )
    return out


def _sequence_parallel_findings(config: TrainConfig, shape: ModelShape, layout: Layout) -> list[str]:
    """A sequence-parallel size the actor GPUs or the model's heads cannot be split by."""
    from videorl.actor.ulysses import valid_sizes  # torch

    k, gpus = config.actor.sequence_parallel_size, layout.actor_gpus
    if k == 1 or (gpus % k == 0 and shape.heads % k == 0):
        return []
    return [
        f"actor.sequence_parallel_size={k}: must divide the {gpus} actor GPUs and the {shape.heads} "
        f"attention heads (Ulysses splits the heads); sizes that work: {valid_sizes(shape.heads, gpus)}"
    ]


def _update_fixes(
    config: TrainConfig, shape: ModelShape, placement: Placement, layout: Layout, result: Plan
) -> list[str]:
    """The settings that would make the update fit, each on its own."""
    from videorl.actor.ulysses import valid_sizes  # torch

    g, update, seq = placement.gpu_memory_gb, result.update, result.sequence
    fixes = []
    if "engine_awake" in update:
        fixes.append("rollout.engine_options.enable_sleep_mode=true (GPUs)")
    if not config.actor.gradient_checkpointing:
        fixes.append("actor.gradient_checkpointing=true")
    rest = update["total"] - update["states"]
    if rest < g:
        who = "actor GPUs" if layout.split else "GPUs"
        fixes.append(f"at least {math.ceil(16 * shape.parameters / GB / (g - rest))} {who} (states shrink)")
    k = config.actor.sequence_parallel_size
    larger = [
        n
        for n in valid_sizes(shape.heads, layout.actor_gpus)
        if n > k and update_phase(config, shape, placement, layout, seq, n)["total"] <= g
    ]
    if larger:
        shrink = "text and vision-tower" if shape.shards_tower else "text"
        fixes.append(f"actor.sequence_parallel_size={larger[0]} (the {shrink} activations shrink)")
    _, block = _layer_working_set(shape, 0, seq["visual"] * shape.spatial_merge**2)
    vision = update["vision_checkpoints"] + _gb(block) + update["visual_features"]
    if k > 1 and not shape.shards_tower:
        fixes.append(
            f"note: the vision tower's {vision:.2f} GB (checkpoints, working set, features) is per rank "
            "whatever the sequence-parallel size: the tower is not sharded by frames (its backend has no "
            "sequence_parallel_vision)"
        )
    if 0 < result.longest.get("frames", 0) < seq["frames"]:
        fixes.append(
            f"data.video_max_frames <= {result.longest['frames']} (the longest video that fits, at "
            f"{seq['frame_pixels']} pixels per frame)"
        )
    return fixes
