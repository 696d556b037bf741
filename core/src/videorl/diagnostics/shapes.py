"""Public model shapes for ``videorl plan --shape FAMILY-SIZE``: the values of each checkpoint's
``config.json`` that set its memory (widths, depths, heads, vocabulary), written as a bare
``config.json`` over transformers' defaults of the family, so no checkpoint is downloaded.

Stated from the published configs (Hugging Face Hub); compare with your checkpoint's ``config.json``
when it differs, and pass that folder as ``model.path`` instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from videorl.errors import ConfigError

_QWEN2_5_VISION = {
    "depth": 32,
    "hidden_size": 1280,
    "intermediate_size": 3420,
    "num_heads": 16,
    "fullatt_block_indexes": [7, 15, 23, 31],
    "window_size": 112,
}


def _qwen2_5(
    hidden: int, layers: int, ffn: int, heads: int, kv: int, vocab: int, tied: bool
) -> dict[str, Any]:
    return {
        "model_type": "qwen2_5_vl",
        "tie_word_embeddings": tied,
        "text_config": {
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "intermediate_size": ffn,
            "num_attention_heads": heads,
            "num_key_value_heads": kv,
            "vocab_size": vocab,
            "tie_word_embeddings": tied,
            "layer_types": ["full_attention"] * layers,
            "rope_parameters": {"mrope_section": [16, 24, 24], "rope_theta": 1e6, "rope_type": "default"},
        },
        "vision_config": {**_QWEN2_5_VISION, "out_hidden_size": hidden},
    }


def _qwen3(
    hidden: int, layers: int, ffn: int, heads: int, tied: bool, vision: tuple[int, int, int, list[int]]
) -> dict[str, Any]:
    depth, width, vffn, deepstack = vision
    return {
        "model_type": "qwen3_vl",
        "tie_word_embeddings": tied,
        "text_config": {
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "intermediate_size": ffn,
            "num_attention_heads": heads,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 151936,
            "tie_word_embeddings": tied,
            "rope_parameters": {
                "mrope_interleaved": True,
                "mrope_section": [24, 20, 20],
                "rope_theta": 5e6,
                "rope_type": "default",
            },
        },
        "vision_config": {
            "depth": depth,
            "hidden_size": width,
            "intermediate_size": vffn,
            "num_heads": 16,
            "out_hidden_size": hidden,
            "num_position_embeddings": 2304,
            "deepstack_visual_indexes": deepstack,
        },
    }


_SMALL_VISION = (24, 1024, 4096, [5, 11, 17])
_LARGE_VISION = (27, 1152, 4304, [8, 16, 24])

#: FAMILY-SIZE -> the config.json values that matter for memory
SHAPES: dict[str, dict[str, Any]] = {
    "qwen2_5_vl-3b": _qwen2_5(2048, 36, 11008, 16, 2, 151936, True),
    "qwen2_5_vl-7b": _qwen2_5(3584, 28, 18944, 28, 4, 152064, False),
    "qwen2_5_vl-32b": _qwen2_5(5120, 64, 27648, 40, 8, 152064, False),
    "qwen2_5_vl-72b": _qwen2_5(8192, 80, 29568, 64, 8, 152064, False),
    "qwen3_vl-2b": _qwen3(2048, 28, 6144, 16, True, _SMALL_VISION),
    "qwen3_vl-4b": _qwen3(2560, 36, 9728, 32, True, _SMALL_VISION),
    "qwen3_vl-8b": _qwen3(4096, 36, 12288, 32, False, _LARGE_VISION),
    "qwen3_vl-32b": _qwen3(5120, 64, 25600, 64, False, _LARGE_VISION),
}


def write_shape(name: str, folder: Path) -> Path:
    """Write the bare ``config.json`` of shape ``name`` into ``folder`` (made); the folder."""
    from transformers import AutoConfig

    if name not in SHAPES:
        raise ConfigError(f"plan --shape {name!r}: unknown shape; known: {', '.join(sorted(SHAPES))}")
    shape = SHAPES[name]
    config = AutoConfig.for_model(shape["model_type"]).to_dict()
    for key, values in shape.items():
        config[key] = {**config.get(key, {}), **values} if isinstance(values, dict) else values
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    return folder
