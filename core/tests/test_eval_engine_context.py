"""The context length of eval's vLLM engine: derived as training derives its own, unless set."""

from __future__ import annotations

from dataclasses import replace

import pytest

from videorl.config import DataConfig
from videorl.errors import ConfigError
from videorl.eval.compose import engine_identity, max_model_len
from videorl.eval.config import EvalConfig, EvalEngineConfig, EvalSamplingConfig


def test_eval_context_is_the_training_prompt_limit_plus_the_response_unless_set() -> None:
    config = EvalConfig(sampling=EvalSamplingConfig(max_tokens=1024))
    assert DataConfig(train_files=["-"]).max_prompt_length == 24576  # training's default prompt limit
    assert max_model_len(config) == 24576 + 1024
    assert max_model_len(replace(config, sampling=EvalSamplingConfig(max_tokens=64))) == 24576 + 64
    assert max_model_len(replace(config, engine=EvalEngineConfig(name="vllm", max_model_len=4096))) == 4096


def test_the_engine_is_any_registered_one_and_an_unknown_name_says_which_are() -> None:
    from videorl.plugins import load_plugins

    plugins = load_plugins()
    vllm = EvalConfig(engine=EvalEngineConfig(name="vllm", dtype="bfloat16"))
    assert engine_identity(vllm, plugins) == {"name": "vllm", "dtype": "bfloat16"}  # devices of its own
    hf = EvalConfig(engine=EvalEngineConfig(name="HF", device="cpu"))
    assert engine_identity(hf, plugins) == {"name": "hf", "dtype": "float32", "device": "cpu"}
    with pytest.raises(
        ConfigError, match=r"engine\.name \(--engine\): unknown rollout engine 'vlm'\. Did you mean 'vllm'"
    ):
        engine_identity(EvalConfig(engine=EvalEngineConfig(name="vlm")), plugins)
