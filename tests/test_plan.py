"""``videorl plan``: the memory plan of two real model shapes (built on meta from their config), pinned
to the arithmetic of docs/multi-node.md, what does not fit and the setting that would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from videorl.config import load_config
from videorl.diagnostics.plan import ModelShape, Placement, plan, sequence_tokens
from videorl.plugins import load_plugins

#: the published shapes (config.json), applied to a tiny checkpoint of the family (its tokenizer)
QWEN3_VL_8B = {
    "text_config": {
        "hidden_size": 4096,
        "num_hidden_layers": 36,
        "intermediate_size": 12288,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
        "rope_parameters": {
            "mrope_interleaved": True,
            "mrope_section": [24, 20, 20],
            "rope_theta": 5e6,
            "rope_type": "default",
        },
    },
    "vision_config": {
        "depth": 27,
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_heads": 16,
        "out_hidden_size": 4096,
        "num_position_embeddings": 2304,
        "deepstack_visual_indexes": [8, 16, 24],
    },
}
QWEN2_5_VL_7B = {
    "text_config": {
        "hidden_size": 3584,
        "num_hidden_layers": 28,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "layer_types": ["full_attention"] * 28,
        "rope_parameters": {"mrope_section": [16, 24, 24], "rope_theta": 1e6, "rope_type": "default"},
    },
    "vision_config": {
        "depth": 32,
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "out_hidden_size": 3584,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "window_size": 112,
    },
}


def _model(tmp_path: Path, model_type: str, shape: dict[str, Any]) -> Path:
    from videorl_models.tiny import build_tiny

    model = build_tiny(model_type, tmp_path / model_type, seed=0)
    config = json.loads((model / "config.json").read_text())
    for key, values in shape.items():
        config[key] = {**config[key], **values}
    (model / "config.json").write_text(json.dumps(config))
    return model


def _plan(model: Path, placement: Placement, *overrides: str) -> tuple[ModelShape, Any]:
    from videorl.train.compose import make_backend

    config = load_config(None, [f"model.path={model}", "data.train_files=[unused.jsonl]", *overrides])
    backend = make_backend(config, load_plugins())
    shape = ModelShape.of(backend.load_model(device=torch.device("meta")))
    return shape, plan(
        config, shape, placement, sequence_tokens(config, backend, config.data.visual_budget(backend.budget))
    )


def test_qwen3_vl_8b_on_32_gpus_with_tp2_fits_as_docs_multi_node_says(tmp_path: Path) -> None:
    model = _model(tmp_path, "qwen3_vl", QWEN3_VL_8B)
    tp2 = "rollout.engine_options={tensor_parallel_size: 2}"
    shape, result = _plan(model, Placement(32, 141, nodes=4), tp2)
    assert shape.parameters == 8_767_123_696  # the docs' count, by hand
    assert (shape.decoder_layer, shape.root, shape.vision_parameters) == (
        192_946_432,
        1_244_663_808,
        576_388_336,
    )
    assert result.sequence["visual"] == 16_384  # 64 groups of 16 x 16 merged patches
    u = result.update
    assert (u["states"], u["gathered_weights"], u["text_checkpoints"], u["vision_checkpoints"]) == (
        4.38,
        3.59,
        7.11,
        4.08,
    )
    assert (u["visual_features"], u["logits"], u["total"]) == (0.54, 3.73, 27.43)
    r = result.rollout
    assert (r["engine_share"], r["engine_weights"], r["kv_cache"], r["total"]) == (84.6, 8.77, 69.83, 92.98)
    assert 946_000 < r["kv_tokens"] < 948_000 and r["groups_at_once"] == 18
    assert result.host_per_node["weight_refresh"] == 140.27  # 8 ranks x bf16 state dict, pushed in memory
    assert result.fits
    folder = _plan(model, Placement(32, 141, nodes=4), tp2, "rollout.weight_sync=folder")[1]
    assert folder.host_per_node["weight_refresh"] == 280.55  # ... and its copy as a folder in /dev/shm


def test_qwen2_5_vl_7b_on_8_gpus_and_what_does_not_fit(tmp_path: Path) -> None:
    model = _model(tmp_path, "qwen2_5_vl", QWEN2_5_VL_7B)
    shape, result = _plan(model, Placement(8, 80))
    assert shape.parameters == 8_292_166_656  # Qwen2.5-VL-7B: 8.29 B
    assert result.sequence["visual"] == 64 * 18 * 18  # square frames: 504 x 504
    assert result.update["states"] == 16.58 and result.rollout["total"] == 68.58
    assert result.fits
    # the seed's prompt limit is below what the default budget gives for Qwen2.5-VL
    _, short = _plan(model, Placement(8, 80), "data.max_prompt_length=20000")
    assert [f for f in short.findings if "data.max_prompt_length (20000)" in f]
    # two GPUs: 66 GB of states each; the rollout needs a smaller engine share, the update more GPUs
    _, two = _plan(model, Placement(2, 80), "rollout.engine_options={enable_sleep_mode: false}")
    assert two.update["states"] == 66.34 and "engine_awake" in two.update
    update = next(f for f in two.findings if f.startswith("update phase"))
    assert "enable_sleep_mode=true" in update
    assert any("gpu_memory_utilization <= 0.12" in f for f in two.findings)


def test_the_command_prints_the_plan(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from videorl.cli import make_cli

    model = _model(tmp_path, "qwen3_vl", QWEN3_VL_8B)
    config = tmp_path / "run.yaml"
    config.write_text(f"model:\n  path: {model}\ndata:\n  train_files: [unused.jsonl]\n")
    cli = make_cli(load_plugins())
    done = CliRunner().invoke(
        cli,
        [
            "plan",
            str(config),
            "--gpus",
            "32",
            "--gpu-memory",
            "141",
            "--nodes",
            "4",
            "rollout.engine_options={tensor_parallel_size: 2}",
        ],
        obj=load_plugins(),
    )
    assert done.exit_code == 0, done.output
    assert "8.77 B parameters" in done.output and "fits" in done.output.splitlines()[-1]
    done = CliRunner().invoke(
        cli, ["plan", str(config), "--gpus", "2", "--gpu-memory", "80", "--json"], obj=load_plugins()
    )
    assert done.exit_code == 0, done.output
    findings = json.loads(done.output)["findings"]
    assert findings and findings[0].startswith("update phase")


@pytest.mark.parametrize("gpus, nodes", [(0, 1), (6, 4)])
def test_placements_that_cannot_be(gpus: int, nodes: int) -> None:
    from videorl.errors import ConfigError

    with pytest.raises(ConfigError, match="must be a positive multiple of --nodes"):
        Placement(gpus, 80, nodes)
