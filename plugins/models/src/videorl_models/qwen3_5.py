"""Qwen3.5 (dense and MoE): the Qwen3-VL prompt format and processor, without DeepStack.

``AutoTokenizer`` substitutes ``Qwen3_5Tokenizer`` for these checkpoints (it rebuilds the
pre-tokeniser from vocab and merges); the backend always tokenises through the processor's
tokenizer, so every stage uses the same one. Its linear-attention layers run per sequence on a
packed row (:mod:`videorl_models.linear_attention`).
"""

from __future__ import annotations

from typing import Any

from videorl_models.qwen3_vl import Qwen3VLBackend

__all__ = ["Qwen3_5Backend"]


class Qwen3_5Backend(Qwen3VLBackend):
    family = "qwen3_5"
    model_types = ("qwen3_5", "qwen3_5_moe")
    sequence_parallel_unsupported: str | None = (
        "its linear-attention (Gated DeltaNet) layers scan the sequence in order outside transformers' "
        "attention interface, where Ulysses' all-to-all sits, so they would see only this rank's tokens"
    )

    def prepare_model(self, model: Any) -> Any:
        """The Qwen-VL fixes, and linear attention that keeps packed sequences apart."""
        from videorl_models.linear_attention import install_packed_linear_attention

        install_packed_linear_attention(super().prepare_model(model))
        return model
