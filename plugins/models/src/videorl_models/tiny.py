"""Tiny randomly initialised checkpoints of every family, built offline for tests and the demo.

``build_tiny(model_type, out_dir, seed=0)`` trains a byte-level BPE tokenizer on a few sentences
(with the Qwen special tokens, a Qwen chat template, ``<answer>``/``</answer>`` and ``<think>``/
``</think>`` as single tokens, left padding), builds a small model with the family's real
transformers classes and its image and video processors, and writes everything with
``save_pretrained``. Everything else loads it with ``from_pretrained``, as it would a real checkpoint.

Geometry: text hidden 64 with head_dim 32 (vLLM's CPU attention needs head_dim ≥ 32), 2 layers;
vision width 32, depth 2; ``mrope_section`` sums to half the rotary dimension; Qwen3's learned
position grid is square.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["CHAT_TEMPLATE", "TINY_MODEL_TYPES", "build_tiny", "build_tokenizer"]

#: model_type -> family backend name
TINY_MODEL_TYPES: dict[str, str] = {
    "qwen2_vl": "qwen2_vl",
    "qwen2_5_vl": "qwen2_5_vl",
    "qwen3_vl": "qwen3_vl",
    "qwen3_vl_moe": "qwen3_vl",
    "qwen3_5": "qwen3_5",
    "qwen3_5_moe": "qwen3_5",
}

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
WORD_TOKENS = ("<answer>", "</answer>", "<think>", "</think>")

# The pre-tokenisation regexes of Qwen2Tokenizer and Qwen3_5Tokenizer: AutoTokenizer rebuilds the
# pipeline from vocab + merges with these for Qwen3.5, so the trained tokenizer must use the same.
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| "
    r"?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN35_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

_CORPUS = (
    "You are a helpful assistant.",
    "What colour is the square? Options: A. red B. green C. blue D. yellow",
    "Which direction does the object move? A. left B. right C. up D. down",
    "Think about the question first, then give the answer. The answer is",
    "<think> The square is red, so the answer is A. </think> <answer>A</answer>",
    "<answer>B</answer> <answer>C</answer> <answer>D</answer>",
    "How many objects are in the video? Answer with a number: 0 1 2 3 4 5 6 7 8 9 10",
    "<0.5 seconds> <1.0 seconds> <2.5 seconds> <10.0 seconds> the video shows a person",
)

#: Qwen-VL chat template: media placeholders before the text, as in the official templates.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer(model_type: str, vocab_size: int = 512) -> Any:
    """A ``PreTrainedTokenizerFast`` trained on a few sentences, with the Qwen special tokens."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    split = _QWEN35_SPLIT if model_type.startswith("qwen3_5") else _QWEN2_SPLIT
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(_CORPUS) * 4, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in WORD_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        padding_side="left",  # in the constructor: an attribute set later is not saved
        chat_template=CHAT_TEMPLATE,
    )


def _padded_vocab(n: int, multiple: int = 64) -> int:
    """A model vocabulary larger than the tokenizer's, as real checkpoints have (padded rows)."""
    return (n // multiple + 1) * multiple


def _text_config(model_type: str, vocab: int, token_ids: dict[str, int], width: int = 64) -> dict[str, Any]:
    heads = width // 32  # head_dim 32 at every width (vLLM's CPU attention needs >= 32)
    text: dict[str, Any] = {
        "vocab_size": vocab,
        "hidden_size": width,
        "intermediate_size": 2 * width,
        "num_hidden_layers": 2,
        "num_attention_heads": heads,
        "num_key_value_heads": max(1, heads // 2),
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "bos_token_id": token_ids["<|endoftext|>"],
        "eos_token_id": token_ids["<|im_end|>"],
        "pad_token_id": token_ids["<|endoftext|>"],
        "tie_word_embeddings": False,
    }
    if model_type in ("qwen2_vl", "qwen2_5_vl"):
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6]}
    elif model_type.startswith("qwen3_vl"):
        text["head_dim"] = 32
        text["rope_parameters"] = {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [6, 5, 5],
            "mrope_interleaved": True,
        }
    else:  # qwen3_5: partial rotary (a quarter of head_dim), one linear-attention + one full layer
        text.update(
            head_dim=32,
            layer_types=["linear_attention", "full_attention"],
            linear_conv_kernel_dim=4,
            linear_key_head_dim=64,  # vLLM's CPU gated-delta kernel: 64 or more
            linear_value_head_dim=64,
            linear_num_key_heads=2,
            linear_num_value_heads=2,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.25,
                "mrope_section": [2, 1, 1],
                "mrope_interleaved": True,
            },
        )
    if model_type.endswith("_moe"):
        # moe_intermediate_size: 2 × it != hidden, so transformers can tell the Hub's transposed expert
        # layout from its own; norm_topk_prob: real checkpoints carry it, vLLM reads it and transformers
        # always renormalises.
        text.update(
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=width // 4,
            decoder_sparse_step=1,
            norm_topk_prob=True,
        )
        if model_type == "qwen3_5_moe":
            text.update(shared_expert_intermediate_size=32)
    return text


def _vision_config(model_type: str, width: int = 64) -> dict[str, Any]:
    """The vision tower: half the text width, projecting to the text width."""
    common: dict[str, Any] = {
        "depth": 2,
        "num_heads": 2,
        "in_channels": 3,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    }
    if model_type == "qwen2_vl":
        return {**common, "embed_dim": width // 2, "hidden_size": width, "mlp_ratio": 2, "patch_size": 14}
    if model_type == "qwen2_5_vl":
        return {
            **common,
            "hidden_size": width // 2,
            "intermediate_size": width,
            "out_hidden_size": width,
            "patch_size": 14,
            "window_size": 56,
            "fullatt_block_indexes": [1],
            "tokens_per_second": 2,
        }
    vision: dict[str, Any] = {
        **common,
        "hidden_size": width // 2,
        "intermediate_size": width,
        "out_hidden_size": width,
        "patch_size": 16,
        "num_position_embeddings": 64,  # must be a square (an 8×8 learned grid)
    }
    if model_type.startswith("qwen3_vl"):
        vision["deepstack_visual_indexes"] = [0]
    return vision


def _processor_classes(model_type: str) -> tuple[Any, Any, Any]:
    from transformers import Qwen2VLImageProcessor, Qwen2VLVideoProcessor

    if model_type == "qwen2_vl":
        from transformers import Qwen2VLProcessor

        return Qwen2VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor
    if model_type == "qwen2_5_vl":
        from transformers import Qwen2_5_VLProcessor

        return Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor
    from transformers import Qwen3VLProcessor, Qwen3VLVideoProcessor

    return Qwen3VLProcessor, Qwen2VLImageProcessor, Qwen3VLVideoProcessor


def _write_hub_expert_layout(weights: Path) -> None:
    """Rewrite the saved Qwen3-VL-MoE weights in the Hub's expert layout (:mod:`videorl_models.hub_layout`),
    which vLLM loads."""
    from safetensors.torch import load_file, save_file

    from videorl_models.hub_layout import hub_expert_layout

    partial = weights.with_suffix(".partial")
    save_file(hub_expert_layout(load_file(weights)), partial, metadata={"format": "pt"})
    partial.replace(weights)


def build_tiny(model_type: str, out_dir: str | Path, *, seed: int = 0, width: int = 64) -> Path:
    """Write a tiny random checkpoint of ``model_type`` to ``out_dir`` and return the directory.

    ``width`` is the text hidden size (a multiple of 32; the vision tower gets half of it): 64 for
    tests, 128 for the demo, which must learn a task from pixels.
    """
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    if width < 64 or width % 32:
        raise ValueError(f"width must be a multiple of 32 and at least 64, got {width}")
    if model_type not in TINY_MODEL_TYPES:
        raise ValueError(
            f"no tiny model for {model_type!r}; choose one of {', '.join(sorted(TINY_MODEL_TYPES))}"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(model_type)
    vocab = tokenizer.get_vocab()
    ids = {t: vocab[t] for t in SPECIAL_TOKENS}
    config = AutoConfig.for_model(
        model_type,
        text_config=_text_config(model_type, _padded_vocab(len(tokenizer)), ids, width),
        vision_config=_vision_config(model_type, width),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.bos_token_id = ids["<|endoftext|>"]
    model.generation_config.do_sample = False
    model.save_pretrained(out)
    if model_type == "qwen3_vl_moe":
        _write_hub_expert_layout(out / "model.safetensors")

    processor_cls, image_cls, video_cls = _processor_classes(model_type)
    vision = config.vision_config
    patch, merge, tps = vision.patch_size, vision.spatial_merge_size, vision.temporal_patch_size
    factor = patch * merge
    sizes = {"shortest_edge": 4 * factor * factor, "longest_edge": 256 * factor * factor}
    geometry = {"patch_size": patch, "merge_size": merge, "temporal_patch_size": tps, "size": sizes}
    video_extra = {"cap_pixels_per_frame": False} if model_type.startswith("qwen3") else {}
    # Qwen3-VL/3.5 checkpoints normalise images like videos (mean = std = 0.5); Qwen2/2.5 use CLIP's.
    image_extra = {"image_mean": [0.5] * 3, "image_std": [0.5] * 3} if model_type.startswith("qwen3") else {}
    processor = processor_cls(
        image_processor=image_cls(**geometry, **image_extra),
        tokenizer=tokenizer,
        video_processor=video_cls(**geometry, do_sample_frames=False, **video_extra),
        chat_template=CHAT_TEMPLATE,
    )
    processor.save_pretrained(out)
    (out / "videorl_tiny.json").write_text(
        json.dumps(
            {"model_type": model_type, "seed": seed, "width": width, "builder": "videorl_models.tiny"},
            indent=2,
        )
        + "\n"
    )
    return out
