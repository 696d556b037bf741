"""The context length of eval's vLLM engine: derived as training derives its own, unless set."""

from __future__ import annotations

from dataclasses import replace

from videorl.config import DataConfig
from videorl.eval.compose import max_model_len
from videorl.eval.config import EvalConfig, EvalEngineConfig, EvalSamplingConfig


def test_eval_context_is_the_training_prompt_limit_plus_the_response_unless_set() -> None:
    config = EvalConfig(sampling=EvalSamplingConfig(max_tokens=1024))
    assert DataConfig(train_files=["-"]).max_prompt_length == 24576  # training's default prompt limit
    assert max_model_len(config) == 24576 + 1024
    assert max_model_len(replace(config, sampling=EvalSamplingConfig(max_tokens=64))) == 24576 + 64
    assert max_model_len(replace(config, engine=EvalEngineConfig(name="vllm", max_model_len=4096))) == 4096
