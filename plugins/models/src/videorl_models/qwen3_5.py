"""Qwen3.5 (dense and MoE): the Qwen3-VL prompt format and processor, without DeepStack.

``AutoTokenizer`` substitutes ``Qwen3_5Tokenizer`` for these checkpoints (it rebuilds the
pre-tokeniser from vocab and merges); the backend always tokenises through the processor's
tokenizer, so every stage uses the same one.
"""

from __future__ import annotations

from videorl_models.qwen3_vl import Qwen3VLBackend

__all__ = ["Qwen3_5Backend"]


class Qwen3_5Backend(Qwen3VLBackend):
    family = "qwen3_5"
    model_types = ("qwen3_5", "qwen3_5_moe")
