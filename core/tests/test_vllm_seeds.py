"""The vLLM rollout engine samples from its own seed by default (no per-request seeds, which put vLLM's
sampler on its per-request generator path), and takes most of its GPU by default."""

from __future__ import annotations

import inspect

import pytest

from videorl.generation import SamplingParams

pytest.importorskip("vllm")


def test_requests_carry_no_seed_unless_asked() -> None:
    from videorl.rollout.vllm_common import vllm_sampling_params

    params = SamplingParams(n=4, temperature=1.0, max_tokens=16, seed=123)
    assert vllm_sampling_params(params, {}).seed is None  # the engine's seed (seed + rank) drives sampling
    assert vllm_sampling_params(params, {}, per_request_seed=True).seed == 123


def test_the_engine_defaults_no_per_request_seeds_and_a_documented_memory_share() -> None:
    from videorl.rollout.vllm import VLLMEngine
    from videorl.rollout.vllm_common import DEFAULT_GPU_MEMORY_UTILIZATION

    defaults = {k: p.default for k, p in inspect.signature(VLLMEngine).parameters.items()}
    assert defaults["per_request_seeds"] is False
    assert defaults["gpu_memory_utilization"] == DEFAULT_GPU_MEMORY_UTILIZATION == 0.7
