"""The vLLM rollout engine (the CPU build on machines without a GPU, CUDA elsewhere; same API).

The engine receives the backend's compact prompt ids with the cached frames and their
``VideoMetadata``, and processor kwargs that forbid resampling and resizing, so it builds the same
grids as the training forward. Weights are refreshed from the actor through a model directory in
shared memory and ``reload_weights`` (the path that works on CPU and GPU alike; tensors cannot be
passed to vLLM's worker processes directly).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.alignment import check_same_prompt
from videorl.errors import ConfigError
from videorl.rollout.types import Completion, SamplingParams

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.model_inputs import EncodedPrompt

# Logit bias vLLM clamps to [-100, 100]; -100 makes a token's probability e^-100 of the others'.
_SUPPRESS = -100.0


def _default_environment() -> None:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's CPU default (4+) is far too big for tests
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class VLLMEngine:
    """``vllm.LLM`` behind the :class:`~videorl.rollout.RolloutEngine` interface."""

    def __init__(
        self,
        backend: ModelBackend,
        model_path: str | Path | None = None,
        *,
        dtype: str = "auto",
        max_model_len: int = 4096,
        seed: int = 0,
        enforce_eager: bool = True,
        gpu_memory_utilization: float = 0.6,
        tensor_parallel_size: int = 1,
        enable_chunked_prefill: bool | None = None,
        max_num_batched_tokens: int | None = None,
        max_media_per_prompt: int = 4,
    ) -> None:
        _default_environment()
        from vllm import LLM

        self.backend = backend
        path = model_path if model_path is not None else backend.path
        if path is None:
            raise ConfigError("VLLMEngine: give model_path (the backend knows no checkpoint directory)")
        self.model_path = Path(path)
        options: dict[str, Any] = {
            "model": str(self.model_path),
            "dtype": dtype,
            "max_model_len": max_model_len,
            "seed": seed,
            "enforce_eager": enforce_eager,
            "tensor_parallel_size": tensor_parallel_size,
            "logprobs_mode": "processed_logprobs",
            "limit_mm_per_prompt": {"video": max_media_per_prompt, "image": max_media_per_prompt},
        }
        if enable_chunked_prefill is not None:
            options["enable_chunked_prefill"] = enable_chunked_prefill
        if max_num_batched_tokens is not None:
            options["max_num_batched_tokens"] = max_num_batched_tokens
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            options["gpu_memory_utilization"] = gpu_memory_utilization
        self.llm: Any = LLM(**options)
        self.bias = {int(i): _SUPPRESS for i in backend.forbidden_token_ids()}
        self._weights_dir: Path | None = None

    def generate(self, prompts: Sequence[EncodedPrompt], params: SamplingParams) -> list[list[Completion]]:
        from vllm import SamplingParams as VSamplingParams

        requests = [self.backend.rollout_request(p) for p in prompts]
        sampling = VSamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,
            max_tokens=params.max_tokens,
            seed=params.seed,
            logprobs=0,
            logit_bias=self.bias or None,
        )
        outputs = self.llm.generate([r.vllm_prompt() for r in requests], sampling, use_tqdm=False)
        groups: list[list[Completion]] = []
        for request, output in zip(requests, outputs):
            check_same_prompt(request.sample_id, request.prompt_ids, output.prompt_token_ids or [], where="vLLM")
            group = []
            for completion in output.outputs:
                ids = [int(t) for t in completion.token_ids]
                steps: list[Any] = list(completion.logprobs or [])
                logprobs = [float(step[t].logprob) for step, t in zip(steps, ids)]
                reason = "stop" if completion.finish_reason == "stop" else "length"
                group.append(Completion(ids, logprobs, reason))
            groups.append(group)
        return groups

    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Write ``state_dict`` as a model directory in shared memory and have vLLM reload from it.

        vLLM points its model config at the directory it reloads from (and, in one process, loads
        its processor from there later), so the directory is a whole HF model directory: the base
        model's config, tokenizer and processor files with the new weights.
        """
        from videorl.train.checkpoint import export_hf_model

        if self._weights_dir is None:
            shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
            self._weights_dir = Path(tempfile.mkdtemp(prefix="videorl-weights-", dir=shm))
            # removed by close(), or at the latest when the engine is collected or the process exits
            self._cleanup = weakref.finalize(self, shutil.rmtree, self._weights_dir, ignore_errors=True)
        model_dir = export_hf_model(dict(state_dict), self.model_path, self._weights_dir / "model", overwrite=True)
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(model_dir)})
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Release vLLM and remove the weights directory."""
        if self._weights_dir is not None:
            self._cleanup()
            self._weights_dir = None
        self.llm = None
