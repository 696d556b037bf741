"""Rollout engines: generate n responses per prompt with per-token log-probs.

Engines are plugins (``register_rollout_engines``); core registers ``hf`` (transformers
``generate``) and ``vllm``. Both take prompts already encoded by the model backend, so the engine
sees the same prompt ids and grids as the training forward.
"""

from videorl.generation import Completion, RolloutEngine, SamplingParams

__all__ = ["Completion", "RolloutEngine", "SamplingParams"]
