"""Rollout engines made by name from the registry, and the engine of one training rank (its placement,
tensor-parallel groups). What an engine can do is what it declares
(:class:`~videorl.generation.EngineCapabilities`), never its name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from videorl.devices import local_device
from videorl.errors import ConfigError
from videorl.generation import capabilities_of
from videorl.rollout.placement import GroupedEngine, engine_placement
from videorl.rollout.vllm_common import weights_dtype

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
    weight_sync: str | None = None,
    weight_bucket_mb: int | None = None,
) -> RolloutEngine:
    """The rollout engine ``name`` for ``backend``'s checkpoint, with ``options``
    (``rollout.engine_options``).

    An engine that can share the actor's module (the ``hf`` engine) generates with ``model`` when given
    (the actor itself, never refreshed), else with a copy of its own on ``device``; every other loads
    ``model_path``, in ``dtype``, seeded with ``seed``, with room for ``max_model_len`` tokens per
    sequence and on ``visible_devices`` (:mod:`videorl.rollout.placement`), refreshed as ``weight_sync``
    says with buckets of ``weight_bucket_mb`` (``rollout.*``), each unless ``options`` say otherwise.
    An option the engine does not take is a :class:`ConfigError`.
    """
    import inspect

    import torch

    canonical = plugins.rollout_engines.canonical(name)
    factory = plugins.rollout_engines.get(canonical)
    kwargs = dict(options or {})
    accepted = inspect.signature(factory).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
        for key in kwargs:
            if key not in accepted or key in ("backend", "model", "model_path", "owns_model"):
                valid = [
                    k for k in accepted if k not in ("self", "backend", "model", "model_path", "owns_model")
                ]
                raise ConfigError(
                    f"rollout.engine_options.{key}: the {canonical} engine takes no option {key!r}; "
                    f"its options: {', '.join(valid)}"
                )
    if capabilities_of(factory).shares_actor_module:
        owns = model is None
        if owns:
            from videorl.devices import use_fast_attention

            model = backend.load_model(dtype=getattr(torch, dtype), device=device)
            use_fast_attention(model, getattr(torch, dtype))
        engine: RolloutEngine = factory(backend, model, owns_model=owns, **kwargs)
        return engine
    for key, value in (
        ("dtype", dtype),
        ("seed", seed),
        ("max_model_len", max_model_len),
        ("visible_devices", visible_devices),
        ("weight_sync", weight_sync),
        ("weight_bucket_mb", weight_bucket_mb),
    ):
        if key in accepted and value is not None:
            kwargs.setdefault(key, value)
    engine = factory(backend, model_path, **kwargs)
    return engine


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

    engine_name = plugins.rollout_engines.canonical(config.rollout.engine)
    capabilities = capabilities_of(plugins.rollout_engines.get(engine_name))
    shares = capabilities.shares_actor_module and dist.world_size == 1
    placement = engine_placement(
        rank=dist.rank,
        world_size=dist.world_size,
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", str(dist.world_size))),
        tensor_parallel_size=int(config.rollout.engine_options.get("tensor_parallel_size", 1)),
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
    return GroupedEngine(engine, placement, groups[dist.rank // size], dtype), shares


def max_model_len(config: TrainConfig) -> int:
    """The longest sequence an engine must hold: the longest prompt and the longest response."""
    return config.data.max_prompt_length + config.rollout.max_response_length
