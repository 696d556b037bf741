"""Rollout engines and workflows made by name from the registry, and the engine of one training rank (its
placement, tensor-parallel groups). What an engine can do is what it declares
(:class:`~videorl.generation.EngineCapabilities`), never its name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from videorl.devices import local_device
from videorl.errors import ConfigError, RegistryError
from videorl.generation import DEFAULT_BUCKET_MB, EngineSpec, capabilities_of
from videorl.rollout.placement import GroupedEngine, engine_placement
from videorl.rollout.vllm_common import weights_dtype
from videorl.rollout.workflow import RolloutWorkflow

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.config import TrainConfig
    from videorl.parallel import Parallel
    from videorl.plugins import Plugins
    from videorl.rollout import RolloutEngine


def make_engine(
    plugins: Plugins,
    name: str,
    backend: ModelBackend,
    *,
    model_path: str,
    dtype: str,
    seed: int,
    options: Mapping[str, Any] | None = None,
    model: Any = None,
    device: Any = None,
    max_model_len: int | None = None,
    visible_devices: str | None = None,
    weight_sync: Literal["memory", "folder"] = "memory",
    weight_bucket_mb: int = DEFAULT_BUCKET_MB,
    max_batch_prompts: int | None = None,
    max_num_batched_tokens: int | None = None,
) -> RolloutEngine:
    """The rollout engine ``name`` for ``backend``'s checkpoint: its registered factory's ``from_spec``
    with an :class:`~videorl.generation.EngineSpec` of the keywords (each described there) and
    ``options`` (``rollout.engine_options``), which the engine checks itself.

    ``model`` (the actor's module) goes to an engine that declares it can share it, never to another.
    """
    canonical = plugins.rollout_engines.canonical(name)
    factory = plugins.rollout_engines.get(canonical)
    capabilities = capabilities_of(factory)
    if not callable(getattr(factory, "from_spec", None)):
        origin = plugins.rollout_engines.entry(canonical).origin
        raise ConfigError(
            f"rollout engine {canonical!r} (distribution {origin!r}) has no from_spec(backend, spec, "
            "options); an engine plugin registers a class with capabilities and from_spec "
            "(docs/plugin-authors/engines.md)"
        )
    spec = EngineSpec(
        name=canonical,
        model_path=model_path,
        dtype=dtype,
        seed=seed,
        max_model_len=max_model_len,
        device=device,
        visible_devices=visible_devices,
        weight_sync=weight_sync,
        weight_bucket_mb=weight_bucket_mb,
        actor_module=model if capabilities.shares_actor_module else None,
        max_batch_prompts=max_batch_prompts,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    engine: RolloutEngine = factory.from_spec(backend, spec, dict(options or {}))
    return engine


def make_workflow(
    plugins: Plugins, name: str, config: TrainConfig | None = None, *, key: str = "rollout.workflow"
) -> RolloutWorkflow:
    """The rollout workflow ``name`` from the registry, made once; a workflow with ``setup(config,
    plugins)`` looks up its own components by name there (``tool_agent``: its tools), the one place a
    run's names are resolved. Training, ``videorl eval run --workflow`` and ``trainer.benchmarks``
    all make theirs here; ``key`` names the setting in errors (an unknown name: the closest ones)."""
    try:
        workflow = plugins.rollout_workflows.create(name)
    except RegistryError as exc:
        raise ConfigError(f"{key}: {exc}") from None
    if not isinstance(workflow, RolloutWorkflow):
        raise ConfigError(
            f"{key} {name!r} made a {type(workflow).__name__}, which has no rollout(...) method "
            "(see videorl.api.RolloutWorkflow)"
        )
    setup = getattr(workflow, "setup", None)
    if config is not None and callable(setup):
        setup(config, plugins)
    return workflow


def make_rank_engine(
    config: TrainConfig, plugins: Plugins, backend: ModelBackend, model: Any, dist: Parallel
) -> tuple[RolloutEngine, bool]:
    """This rank's rollout engine, and whether it generates with the actor's own ``model`` (an engine
    that can share it, in one process: no copy, never refreshed).

    A separate engine runs on this rank's GPUs (:func:`videorl.rollout.placement.engine_placement`);
    with tensor parallelism only the first rank of each group hosts one, the others hand it their
    prompts (:class:`~videorl.rollout.placement.GroupedEngine`)."""
    import os

    import torch

    tp = int(config.rollout.engine_options.get("tensor_parallel_size", 1))
    if tp > 1 and dist.sp_size > 1:  # a tensor-parallel engine's ranks generate together
        raise ConfigError(
            f"rollout.engine_options.tensor_parallel_size={tp} with actor.sequence_parallel_size="
            f"{dist.sp_size}: the first rank of each sequence-parallel group rolls out alone, and a "
            "tensor-parallel engine needs every rank of its group; set one of them to 1"
        )
    engine_name = plugins.rollout_engines.canonical(config.rollout.engine)
    capabilities = capabilities_of(plugins.rollout_engines.get(engine_name))
    shares = capabilities.shares_actor_module and dist.world_size == 1
    placement = engine_placement(
        rank=dist.rank,
        world_size=dist.world_size,
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", str(dist.world_size))),
        tensor_parallel_size=tp,
        visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        cuda=torch.cuda.is_available() and capabilities.own_devices,
    )
    engine: RolloutEngine | None = None
    if placement.hosts_engine:
        engine = make_engine(
            plugins,
            engine_name,
            backend,
            model_path=config.model.path,
            dtype=config.model.dtype,
            seed=config.seed + dist.rank,
            options=config.rollout.engine_options,
            model=model if shares else None,
            device=local_device(),
            max_model_len=max_model_len(config),
            visible_devices=placement.visible_devices,
            weight_sync=config.rollout.weight_sync,
            weight_bucket_mb=config.rollout.weight_bucket_mb,
        )
    if len(placement.group) == 1:
        assert engine is not None
        return engine, shares
    from videorl.parallel import new_group

    size = len(placement.group)
    groups = [new_group(range(g, g + size)) for g in range(0, dist.world_size, size)]  # all ranks

    dtype = weights_dtype(str(config.rollout.engine_options.get("dtype", config.model.dtype)))
    return GroupedEngine(engine, placement, groups[dist.rank // size], dtype, capabilities), shares


def max_model_len(config: TrainConfig) -> int:
    """The longest sequence an engine must hold: the longest prompt and the longest response."""
    return config.data.max_prompt_length + config.rollout.max_response_length
