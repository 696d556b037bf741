"""Tiny checkpoints: offline, reproducible, loaded like real ones; the ``videorl models`` commands."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from videorl_models.tiny import TINY_MODEL_TYPES, build_tiny


@pytest.mark.parametrize("model_type", sorted(TINY_MODEL_TYPES))
def test_tokenizer_loads_as_saved(model_type: str, tiny_dir: Callable[[str], Path]) -> None:
    from tokenizers import Tokenizer
    from transformers import AutoProcessor, AutoTokenizer

    path = tiny_dir(model_type)
    auto = AutoTokenizer.from_pretrained(path)  # Qwen3.5: transformers substitutes Qwen3_5Tokenizer
    saved = Tokenizer.from_file(str(path / "tokenizer.json"))
    text = "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>Café? <answer>B</answer><|im_end|>"
    assert auto(text, add_special_tokens=False)["input_ids"] == saved.encode(text).ids
    assert (
        auto.padding_side == "left" and auto.pad_token == "<|endoftext|>" and auto.eos_token == "<|im_end|>"
    )
    for word in ("<answer>", "</answer>", "<think>", "A", "B", "C", "D"):
        assert len(auto(word, add_special_tokens=False)["input_ids"]) == 1, word
    processor = AutoProcessor.from_pretrained(path)
    assert processor.tokenizer.get_vocab() == auto.get_vocab()
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == model_type
    assert config["text_config"]["hidden_size"] // config["text_config"]["num_attention_heads"] >= 32


def test_builds_are_reproducible(tmp_path: Path) -> None:
    a = load_file(str(build_tiny("qwen2_vl", tmp_path / "a", seed=3) / "model.safetensors"))
    b = load_file(str(build_tiny("qwen2_vl", tmp_path / "b", seed=3) / "model.safetensors"))
    c = load_file(str(build_tiny("qwen2_vl", tmp_path / "c", seed=4) / "model.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    assert any(not (a[k] == c[k]).all() for k in a)
    assert sum(t.numel() for t in a.values()) < 1_000_000


def test_models_commands(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    listed = run_cli("models", "list", "--json").assert_success().json()
    mine = {row["family"]: row for row in listed if row["plugin"] == "videorl-models"}
    assert {f: (r["factor"], r["model_types"]) for f, r in mine.items()} == {
        "qwen2_vl": (28, ["qwen2_vl"]),
        "qwen2_5_vl": (28, ["qwen2_5_vl"]),
        "qwen3_vl": (32, ["qwen3_vl", "qwen3_vl_moe"]),
        "qwen3_5": (32, ["qwen3_5", "qwen3_5_moe"]),
    }
    result = run_cli("models", "tiny", "qwen3_vl_moe", str(tmp_path / "moe"), "--seed", "1").assert_success()
    assert "qwen3_vl_moe" in result.output
    assert json.loads((tmp_path / "moe" / "config.json").read_text())["model_type"] == "qwen3_vl_moe"
    bad = run_cli("models", "tiny", "qwen2_5", str(tmp_path / "x"))
    assert bad.exit_code == 2 and "Did you mean" in bad.stderr
    plugins = run_cli("plugins", "--json").assert_success().json()
    models = next(p for p in plugins if p["name"] == "videorl-models")
    assert models["components"]["model_backends"] == ["qwen2_5_vl", "qwen2_vl", "qwen3_5", "qwen3_vl"]
