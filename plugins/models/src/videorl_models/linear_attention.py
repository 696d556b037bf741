"""Qwen3.5's linear-attention layers on a packed row: each sequence on its own.

A packed row (``actor.padding_free``, :class:`videorl.api.PackedInputs`) keeps its sequences apart
through the per-sequence token counters of ``position_ids``: enough for the full-attention layers
(transformers builds a block-diagonal mask, or flash-attention's varlen kernel, from them), but
Qwen3.5's Gated DeltaNet layers never see the positions. Their causal convolution and recurrent
state would run across the whole row, each sequence continuing the previous one's state
(transformers' PyTorch fallback ignores sequence boundaries; the fla kernel would need
``cu_seqlens``, which the VL model cannot pass without handing them to the vision tower too).

:func:`install_packed_linear_attention` therefore reads the boundaries from the position ids the
text model receives and runs every linear-attention layer once per sequence, with a fresh state,
on exactly that sequence's tokens (no padding: its cost is linear in the length either way). A
padded batch, generation and anything with a cache go through unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from videorl.api import packed_lengths

if TYPE_CHECKING:
    import torch

__all__ = ["install_packed_linear_attention", "packed_segments"]


def packed_segments(position_ids: Any, attention_mask: Any, past_key_values: Any) -> list[int] | None:
    """The sequence lengths of a packed row (``position_ids`` ``4 × 1 × N``, no mask, no cache),
    or ``None`` when the forward is not a packed one."""
    if attention_mask is not None or past_key_values is not None or position_ids is None:
        return None
    if position_ids.ndim != 3 or position_ids.shape[0] != 4 or position_ids.shape[1] != 1:
        return None
    return packed_lengths(position_ids[0])


def install_packed_linear_attention(model: Any) -> None:
    """Make every linear-attention layer of ``model`` run per sequence on a packed row."""
    import torch

    inner = getattr(model, "model", model)
    language_model = getattr(inner, "language_model", inner)
    state: dict[str, list[int] | None] = {"segments": None}

    def before_text_model(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        state["segments"] = packed_segments(
            kwargs.get("position_ids"), kwargs.get("attention_mask"), kwargs.get("past_key_values")
        )

    language_model.register_forward_pre_hook(before_text_model, with_kwargs=True)

    def per_sequence(original: Any) -> Any:
        def forward(
            hidden_states: torch.Tensor,
            cache_params: Any = None,
            attention_mask: torch.Tensor | None = None,
            **kwargs: Any,
        ) -> torch.Tensor:
            segments = state["segments"]
            if segments is None or cache_params is not None:
                return original(
                    hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs
                )
            parts = torch.split(hidden_states, segments, dim=1)
            return torch.cat([original(part, **kwargs) for part in parts], dim=1)

        return forward

    for layer in getattr(language_model, "layers", []):
        linear = getattr(layer, "linear_attn", None)
        if linear is not None:
            linear.forward = per_sequence(linear.forward)
