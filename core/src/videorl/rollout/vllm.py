"""The vLLM rollout engine (the CPU build on machines without a GPU, CUDA elsewhere; same API).

The engine receives the backend's compact prompt ids with the cached frames and their
``VideoMetadata``, and processor kwargs that forbid resampling and resizing, so it builds the same
grids as the training forward. Weights are refreshed from the actor in memory, in buckets, into the
model's ``load_weights`` (:mod:`videorl.rollout.vllm_weights`: the tensors themselves in one
process, their bytes to vLLM's CPU worker processes, CUDA IPC handles on GPUs), or, with
``weight_sync="folder"``, through a model folder in shared memory and vLLM's ``reload_weights``.
What it shares with the async engine lives in :mod:`videorl.rollout.vllm_common`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from videorl.backend import engine_token_map
from videorl.devices import release_cached_memory
from videorl.errors import ConfigError
from videorl.generation import DEFAULT_BUCKET_MB, Completion, EngineCapabilities, EngineSpec, SamplingParams
from videorl.rollout.vllm_common import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    WeightsFolder,
    check_engine_options,
    completions,
    default_environment,
    engine_options,
    engine_process_environment,
    model_dir,
    platform_defaults,
    spec_keywords,
    suppression_bias,
    vllm_sampling_params,
    weight_sync_options,
    weights_dtype,
)
from videorl.rollout.vllm_weights import MemoryRefresh

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.model_inputs import EncodedPrompt


class VLLMEngine:
    """``vllm.LLM`` behind the :class:`~videorl.rollout.RolloutEngine` interface."""

    #: ``incremental``: a tool_agent turn's context is encoded up to its new reply only (measured in
    #: tests/test_train_vllm.py: the earlier videos are not encoded again, the earlier turns' KV is reused)
    capabilities = EngineCapabilities(can_sleep=True, incremental=True, async_variant="vllm-async")

    def __init__(
        self,
        backend: ModelBackend,
        model_path: str | Path | None = None,
        *,
        dtype: str = "auto",
        max_model_len: int = 4096,
        seed: int = 0,
        enforce_eager: bool | None = None,
        gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
        tensor_parallel_size: int = 1,
        max_media_per_prompt: int = 4,
        enable_sleep_mode: bool | None = None,
        visible_devices: str | None = None,
        weight_sync: Literal["memory", "folder"] = "memory",
        weight_bucket_mb: int = DEFAULT_BUCKET_MB,
        per_request_seeds: bool = False,
        **engine_args: Any,
    ) -> None:
        """``engine_args`` go to ``vllm.LLM`` as they are (``max_num_seqs``, ``enable_prefix_caching``,
        ``distributed_executor_backend``, any field of vLLM's ``EngineArgs``; another name is a
        :class:`ConfigError` with the closest ones). ``enforce_eager`` and ``enable_sleep_mode`` default
        to what the platform supports (:func:`platform_defaults`); ``visible_devices`` is the
        ``CUDA_VISIBLE_DEVICES`` of the engine's processes (:mod:`videorl.rollout.placement`);
        ``weight_sync`` and ``weight_bucket_mb``: how :meth:`update_weights` reaches the engine;
        ``per_request_seeds``: seed each request by its ``SamplingParams.seed`` instead of sampling
        from the engine's ``seed`` (:func:`vllm_sampling_params`)."""
        default_environment()
        check_engine_options(engine_args, VLLMEngine)
        sync = weight_sync_options(weight_sync, weight_bucket_mb, engine_args)
        from vllm import LLM
        from vllm.platforms import current_platform

        if enable_sleep_mode and not current_platform.is_sleep_mode_available():
            raise ConfigError(
                "rollout.engine_options.enable_sleep_mode: vLLM's sleep mode needs a CUDA, ROCm or XPU "
                "device; "
                f"this platform is {current_platform.device_name or current_platform.__class__.__name__}"
            )
        defaults = platform_defaults(current_platform)
        enforce_eager = defaults["enforce_eager"] if enforce_eager is None else enforce_eager
        sleep_mode = defaults["enable_sleep_mode"] if enable_sleep_mode is None else enable_sleep_mode

        self.backend = backend
        self.model_path = model_dir(backend, model_path, "VLLMEngine")
        options = engine_options(
            self.model_path,
            dtype=dtype,
            seed=seed,
            enforce_eager=enforce_eager,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_media_per_prompt=max_media_per_prompt,
            max_model_len=max_model_len,
            enable_sleep_mode=sleep_mode or None,
            **{**engine_args, **sync},
        )
        with engine_process_environment(visible_devices):
            self.llm: Any = LLM(**options)
        self.bias = suppression_bias(backend)
        self.per_request_seeds = per_request_seeds
        self.weight_sync = weight_sync
        self._weights = WeightsFolder(self.model_path)
        self._memory = MemoryRefresh(self.llm.collective_rpc, weight_bucket_mb)
        self.sleep_mode, self.asleep = sleep_mode, False
        #: the dtype refreshed weights are written in (vLLM would cast them to it on loading anyway)
        self.weights_dtype = weights_dtype(dtype)

    @classmethod
    def from_spec(cls, backend: ModelBackend, spec: EngineSpec, options: Mapping[str, Any]) -> VLLMEngine:
        """The engine as ``spec`` asks, ``options`` winning (each checked by :meth:`__init__`)."""
        fields = ("dtype", "seed", "max_model_len", "visible_devices", "weight_sync", "weight_bucket_mb")
        return cls(backend, spec.model_path, **spec_keywords(spec, options, fields))

    def sleep(self) -> None:
        """With ``enable_sleep_mode``: free the engine's device memory (weights and KV cache, vLLM's
        level 2) while the actor updates; the next :meth:`update_weights` wakes it with the new weights."""
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=2)
            self.asleep = True

    def generate(self, prompts: Sequence[EncodedPrompt], params: SamplingParams) -> list[list[Completion]]:
        if self.asleep:
            raise RuntimeError("the vLLM engine is asleep: its weights come back with update_weights()")
        requests = [self.backend.rollout_request(p) for p in prompts]
        sampling = vllm_sampling_params(params, self.bias, per_request_seed=self.per_request_seeds)
        outputs = self.llm.generate([r.vllm_prompt() for r in requests], sampling, use_tqdm=False)
        token_map = engine_token_map(self.backend)
        return [completions(request, output, token_map) for request, output in zip(requests, outputs)]

    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Load ``state_dict`` (HF names, full tensors) into the engine: in memory, bucket by bucket,
        or written as a model folder in shared memory that vLLM reloads (``weight_sync="folder"``).
        An engine asleep gets its weights back first, then its KV cache."""
        model = self._weights.write(state_dict) if self.weight_sync == "folder" else None
        if model is not None:
            self._reload(
                lambda: self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(model)})
            )
        else:
            self._reload(lambda: self._memory.push(state_dict.items()))

    def takes_device_weights(self) -> bool:
        """Whether a refresh reaches the workers by CUDA IPC (in memory, workers on a GPU): then
        :meth:`update_weights_stream` takes the weights where they were gathered, on the GPU."""
        return self.weight_sync == "memory" and self._memory.resolve() == "cuda_ipc"

    def update_weights_stream(self, named: Iterable[tuple[str, Any]]) -> None:
        """:meth:`update_weights` in memory from ``(name, tensor)`` pairs consumed one at a time (each
        is copied into the staging buffer and dropped: the weights are never all held at once)."""
        self._reload(lambda: self._memory.push(named))

    def _reload(self, load: Callable[[], Any]) -> None:
        if self.asleep:
            release_cached_memory()  # what the update freed, for the engine's processes to take
            self.llm.wake_up(tags=["weights"])
        load()
        if self.asleep:
            release_cached_memory()  # the staging buffer of a CUDA IPC refresh, for the KV cache
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False
        # Cached prefixes' KV and videos' encoder outputs came from the old weights. The workers'
        # reload (ours and vLLM's reload_weights alike) empties only the workers' encoder cache; the
        # scheduler's record of what they hold is the engine core's, and left as it is, a video seen
        # before the refresh is not encoded again and the worker fails ("Encoder cache miss").
        self.llm.reset_prefix_cache()
        self.llm.llm_engine.reset_encoder_cache()

    def close(self) -> None:
        """Release vLLM and remove the weights directory."""
        self._weights.close()
        self.llm = None
