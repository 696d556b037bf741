"""The vLLM ``AsyncLLM`` rollout engine: continuous batching with chunked prefill, and an async submit.

Same interface as :class:`videorl.rollout.vllm.VLLMEngine` (``generate``, ``update_weights``,
``close``) plus :meth:`AsyncVLLMEngine.submit`, which queues one prompt and returns a
:class:`concurrent.futures.Future` at once: the evaluator hands over each prompt as soon as it is
encoded and vLLM's scheduler batches whatever is in flight. Prefill is chunked
(``max_num_batched_tokens`` tokens per step), so a long video prompt does not stall the decoding of
the others.

The engine runs an asyncio loop in a daemon thread of its own; every method may be called from any
other thread. On vLLM's CPU build a per-request seed together with chunked prefill crashes the worker
("CPU Generator does not use offset"), so there requests carry no seed and sampling follows the
engine's ``seed`` (greedy decoding is unaffected); :meth:`describe` reports which applies. What it
shares with the offline engine lives in :mod:`videorl.rollout.vllm_common`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from videorl.backend import engine_token_map
from videorl.generation import DEFAULT_BUCKET_MB, Completion, EngineCapabilities, EngineSpec, SamplingParams
from videorl.rollout.vllm_common import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    WeightsFolder,
    check_engine_options,
    completions,
    default_environment,
    engine_options,
    model_dir,
    platform_defaults,
    spec_keywords,
    suppression_bias,
    vllm_sampling_params,
    weight_sync_options,
)
from videorl.rollout.vllm_weights import MemoryRefresh

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.model_inputs import EncodedPrompt, RolloutRequest

T = TypeVar("T")


class AsyncVLLMEngine:
    """``vllm.v1.engine.async_llm.AsyncLLM`` behind the :class:`~videorl.rollout.RolloutEngine` interface."""

    capabilities = EngineCapabilities()

    def __init__(
        self,
        backend: ModelBackend,
        model_path: str | Path | None = None,
        *,
        dtype: str = "auto",
        max_model_len: int | None = 4096,
        seed: int = 0,
        enforce_eager: bool | None = None,
        gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
        tensor_parallel_size: int = 1,
        enable_chunked_prefill: bool = True,
        max_num_batched_tokens: int | None = 2048,
        max_num_seqs: int | None = None,
        max_media_per_prompt: int = 4,
        weight_sync: Literal["memory", "folder"] = "memory",
        weight_bucket_mb: int = DEFAULT_BUCKET_MB,
        **engine_args: Any,
    ) -> None:
        """``engine_args`` go to vLLM's ``AsyncEngineArgs`` as they are (any of its fields; another
        name is a :class:`~videorl.errors.ConfigError` with the closest ones); ``enforce_eager``
        defaults to what the platform supports (:func:`~videorl.rollout.vllm_common.platform_defaults`);
        ``weight_sync`` and ``weight_bucket_mb`` as for :class:`~videorl.rollout.vllm.VLLMEngine`."""
        default_environment()
        check_engine_options(engine_args, AsyncVLLMEngine)
        sync = weight_sync_options(weight_sync, weight_bucket_mb, engine_args)
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.platforms import current_platform

        if enforce_eager is None:
            enforce_eager = platform_defaults(current_platform)["enforce_eager"]
        self.backend = backend
        self.model_path = model_dir(backend, model_path, "AsyncVLLMEngine")
        options = engine_options(
            self.model_path,
            dtype=dtype,
            seed=seed,
            enforce_eager=enforce_eager,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            max_media_per_prompt=max_media_per_prompt,
            enable_chunked_prefill=enable_chunked_prefill,
            disable_log_stats=True,
            max_model_len=max_model_len,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            **{**engine_args, **sync},
        )
        cpu = current_platform.is_cpu()
        self.per_request_seed = not (cpu and enable_chunked_prefill)
        self.options = options
        self.bias = suppression_bias(backend)
        self._ids = itertools.count()
        self.weight_sync = weight_sync
        self._weights = WeightsFolder(self.model_path)
        self._memory = MemoryRefresh(self._rpc, weight_bucket_mb)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-async-loop", daemon=True)
        self._thread.start()
        try:
            self.llm: Any = self._call(self._start(AsyncEngineArgs(**options)))
        except BaseException:
            self._stop_loop()
            raise

    @classmethod
    def from_spec(
        cls, backend: ModelBackend, spec: EngineSpec, options: Mapping[str, Any]
    ) -> AsyncVLLMEngine:
        """The engine as ``spec`` asks (its processes see what this one sees), ``options`` winning."""
        fields = (
            "dtype",
            "seed",
            "max_model_len",
            "max_num_batched_tokens",
            "weight_sync",
            "weight_bucket_mb",
        )
        return cls(backend, spec.model_path, **spec_keywords(spec, options, fields))

    @staticmethod
    async def _start(args: Any) -> Any:
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM.from_engine_args(args)  # inside the loop: its output handler starts here

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _rpc(self, method: str, args: tuple[Any, ...] = ()) -> list[Any]:
        result: list[Any] = self._call(self.llm.collective_rpc(method, args=args))
        return result

    def describe(self) -> dict[str, Any]:
        """The engine's settings (recorded by the evaluator)."""
        keys = (
            "dtype",
            "seed",
            "max_model_len",
            "enable_chunked_prefill",
            "max_num_batched_tokens",
            "max_num_seqs",
        )
        return {
            "name": "vllm-async",
            **{k: self.options[k] for k in keys if k in self.options},
            "per_request_seed": self.per_request_seed,
        }

    def _sampling(self, params: SamplingParams) -> Any:
        return vllm_sampling_params(
            params, self.bias, per_request_seed=self.per_request_seed, final_only=True
        )

    async def _generate_one(self, request: RolloutRequest, sampling: Any) -> list[Completion]:
        final = None
        async for output in self.llm.generate(
            request.vllm_prompt(), sampling, f"{request.sample_id}#{next(self._ids)}"
        ):
            final = output
        if final is None:
            raise RuntimeError(f"vLLM returned no output for sample {request.sample_id!r}")
        return completions(request, final, engine_token_map(self.backend))

    def submit(
        self, prompt: EncodedPrompt, params: SamplingParams
    ) -> concurrent.futures.Future[list[Completion]]:
        """Queue one prompt; the future holds its ``params.n`` completions (or the engine's error)."""
        request = self.backend.rollout_request(prompt)
        return asyncio.run_coroutine_threadsafe(
            self._generate_one(request, self._sampling(params)), self._loop
        )

    def generate(self, prompts: Sequence[EncodedPrompt], params: SamplingParams) -> list[list[Completion]]:
        futures = [self.submit(p, params) for p in prompts]
        return [f.result() for f in futures]

    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Load ``state_dict`` between generations (in-flight requests finish first): in memory,
        bucket by bucket, or through a model folder in shared memory (``weight_sync="folder"``)."""
        model = self._weights.write(state_dict) if self.weight_sync == "folder" else None
        if model is not None:
            self._paused(
                lambda: self._call(
                    self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(model)})
                )
            )
        else:
            self._paused(lambda: self._memory.push(state_dict.items()))

    def takes_device_weights(self) -> bool:
        """As :meth:`videorl.rollout.vllm.VLLMEngine.takes_device_weights`."""
        return self.weight_sync == "memory" and self._memory.resolve() == "cuda_ipc"

    def update_weights_stream(self, named: Iterable[tuple[str, Any]]) -> None:
        """:meth:`update_weights` in memory from ``(name, tensor)`` pairs consumed one at a time."""
        self._paused(lambda: self._memory.push(named))

    def _paused(self, load: Callable[[], Any]) -> None:
        # Once the requests in flight are done, the pause empties the prefix, multimodal and encoder
        # caches (the scheduler's record and the workers' outputs together), which nothing refills
        # before the resume: no KV or video encoding from the old weights outlives the refresh.
        self._call(self.llm.pause_generation(mode="wait", clear_cache=True))
        try:
            load()
        finally:
            self._call(self.llm.resume_generation())

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def close(self) -> None:
        self._weights.close()
        if self.llm is not None:
            self.llm.shutdown()
            self.llm = None
        if self._thread.is_alive():
            self._stop_loop()
