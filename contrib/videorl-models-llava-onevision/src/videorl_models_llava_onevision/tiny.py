"""A tiny random LLaVA-OneVision checkpoint, built offline (SigLIP 56×56/14 tower, Qwen2 text model)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["CHAT_TEMPLATE", "build_tiny"]

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'video' %}<video>\n{% elif content['type'] == 'image' %}<image>\n"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_CORPUS = (
    "What colour is the square? A. red B. green C. blue D. yellow",
    "The answer is <answer>A</answer>. Which direction does it move? left right up down",
)


def _write_hub_key_names(weights: Path) -> None:
    """Rewrite the saved weights under the Hub's names for the SigLIP tower
    (:mod:`videorl_models_llava_onevision.hub_layout`), which vLLM loads."""
    from safetensors.torch import load_file, save_file

    from videorl_models_llava_onevision.hub_layout import hub_key_names

    partial = weights.with_suffix(".partial")
    save_file(hub_key_names(load_file(weights)), partial, metadata={"format": "pt"})
    partial.replace(weights)


def build_tiny(out_dir: str | Path, *, seed: int = 0, width: int = 64) -> Path:
    """Write the checkpoint (model, tokenizer, image and video processors) to ``out_dir``.

    ``width`` is the text hidden size (a multiple of 32, at least 64; head_dim 32); the vision tower
    gets half of it.
    """
    if width < 64 or width % 32:
        raise ValueError(f"width must be a multiple of 32 and at least 64, got {width}")
    import torch
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        LlavaOnevisionConfig,
        LlavaOnevisionForConditionalGeneration,
        LlavaOnevisionImageProcessor,
        LlavaOnevisionProcessor,
        LlavaOnevisionVideoProcessor,
        PreTrainedTokenizerFast,
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"]
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(_CORPUS) * 4, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ("<answer>", "</answer>")])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        padding_side="left",
        chat_template=CHAT_TEMPLATE,
        extra_special_tokens={"image_token": "<image>", "video_token": "<video>"},
    )
    vocab = tokenizer.get_vocab()
    side, patch = 56, 14
    config = LlavaOnevisionConfig(
        vision_config={
            "model_type": "siglip_vision_model",
            "hidden_size": width // 2,
            "intermediate_size": width,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": side,
            "patch_size": patch,
        },
        text_config={
            "model_type": "qwen2",
            "vocab_size": (len(tokenizer) // 64 + 1) * 64,
            "hidden_size": width,
            "intermediate_size": 2 * width,
            "num_hidden_layers": 2,
            "num_attention_heads": width // 32,
            "num_key_value_heads": max(1, width // 64),
            "max_position_embeddings": 2048,
            "eos_token_id": vocab["<|im_end|>"],
            "pad_token_id": vocab["<|endoftext|>"],
        },
        image_token_index=vocab["<image>"],
        video_token_index=vocab["<video>"],
        image_grid_pinpoints=[[side, side]],
        vision_feature_layer=-1,
        vision_feature_select_strategy="full",
    )
    torch.manual_seed(seed)
    model = LlavaOnevisionForConditionalGeneration(config)
    model.generation_config.pad_token_id = vocab["<|endoftext|>"]
    model.generation_config.eos_token_id = vocab["<|im_end|>"]
    model.save_pretrained(out)
    _write_hub_key_names(out / "model.safetensors")
    size = {"height": side, "width": side}
    LlavaOnevisionProcessor(
        image_processor=LlavaOnevisionImageProcessor(size=size, image_grid_pinpoints=[[side, side]]),
        tokenizer=tokenizer,
        video_processor=LlavaOnevisionVideoProcessor(size=size),
        num_image_tokens=(side // patch) ** 2,
        vision_feature_select_strategy="full",
        chat_template=CHAT_TEMPLATE,
    ).save_pretrained(out)
    return out
