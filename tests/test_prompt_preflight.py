"""A prompt that cannot fit is found when the datasets load (from the frame cache's headers), with
its row and numbers, not mid-step; and the engine gets room for the longest prompt and response."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from videorl import demo
from videorl.config import load_config
from videorl.errors import DataError
from videorl.plugins import load_plugins


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    out = tmp_path_factory.mktemp("task")
    model, train, val = demo.prepare(out, load_plugins(), family="qwen2_5_vl", seed=0, train=2, val=1)
    return out, model, train, val


def _pieces(task: Any, *extra: str) -> tuple[Any, Any, Any]:
    from videorl.rewards.router import RewardRouter
    from videorl.train.compose import make_backend, make_encoder

    out, model, train, val = task
    plugins = load_plugins()
    config = load_config(
        None, [*demo.demo_overrides(out, model, train, val, steps=1, seed=0, engine="hf"), *extra]
    )
    backend = make_backend(config, plugins)
    return (
        config,
        RewardRouter.from_registry(plugins.rewards, config.rewards),
        make_encoder(config, backend, plugins),
    )


def test_a_prompt_over_the_limit_is_a_load_time_error_with_its_row_and_tokens(task: Any) -> None:
    from videorl.train.compose import load_datasets

    config, rewards, encoder = _pieces(task)
    samples, _ = load_datasets(config, rewards, encoder)  # the demo's limit (512) fits
    lengths = [len(encoder(s).require_encoded()) for s in samples]
    limit = min(lengths) - 1
    config, rewards, encoder = _pieces(task, f"data.max_prompt_length={limit}")
    with pytest.raises(DataError) as info:
        load_datasets(config, rewards, encoder)
    message = str(info.value)
    for sample, length in zip(samples, lengths):
        assert f"{sample.origin}: sample {sample.id!r}: {length} prompt tokens > limit {limit}" in message
    assert "data.max_prompt_length" in message and f"max_frames={demo.FRAMES}" in message


def test_the_engine_is_given_room_for_the_longest_prompt_and_response(task: Any) -> None:
    from videorl.generation import EngineCapabilities, EngineSpec
    from videorl.rollout.factory import make_engine, max_model_len
    from videorl.rollout.vllm_common import spec_keywords

    config, _, _ = _pieces(task, "data.max_prompt_length=700", "rollout.max_response_length=300")
    assert max_model_len(config) == 1000
    seen: list[tuple[EngineSpec, dict[str, Any]]] = []

    class Engine:
        capabilities = EngineCapabilities()

        @classmethod
        def from_spec(cls, backend: Any, spec: EngineSpec, options: dict[str, Any]) -> Engine:
            seen.append((spec, options))
            return cls()

    plugins = load_plugins()
    plugins.rollout_engines.register("recording", Engine, origin="test")
    make_engine(
        plugins,
        "recording",
        None,  # type: ignore[arg-type]
        model_path="m",
        dtype="float32",
        seed=0,
        max_model_len=max_model_len(config),
        visible_devices="3",
        options={"max_model_len": 64},
    )
    spec, options = seen[0]
    assert (spec.name, spec.max_model_len, spec.visible_devices, spec.dtype) == (
        "recording",
        1000,
        "3",
        "float32",
    )
    assert options == {"max_model_len": 64} and spec.actor_module is None
    # a vLLM engine's keywords: the spec's, rollout.engine_options winning
    fields = ("dtype", "max_model_len", "visible_devices")
    assert spec_keywords(spec, options, fields) == {
        "dtype": "float32",
        "max_model_len": 64,
        "visible_devices": "3",
    }


def test_tensor_parallel_groups_need_validation_prompts_on_every_rank(task: Any, tmp_path: Path) -> None:
    """A group generates together (its leader gathers the prompts), so a rank without validation
    prompts would leave the others waiting."""
    from videorl.errors import ConfigError
    from videorl.parallel import Parallel
    from videorl.train.compose import build_training

    out, model, train, val = task  # one validation sample
    config = load_config(
        None,
        [
            *demo.demo_overrides(out, model, train, val, steps=1, seed=0, engine="vllm"),
            f"output_dir={tmp_path / 'r'}",
            "data.rollout_batch_size=2",
            "actor.global_batch_size=2",
            "rollout.engine_options={tensor_parallel_size: 2}",
        ],
    )
    with pytest.raises(ConfigError, match="1 sample\\(s\\) for 2 processes; with tensor-parallel engines"):
        build_training(config, load_plugins(), dist=Parallel(rank=0, world_size=2))
