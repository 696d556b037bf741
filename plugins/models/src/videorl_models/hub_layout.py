"""Qwen3-VL-MoE's weights in the layout of its Hub checkpoints, which vLLM loads.

transformers 5 holds the fused experts transposed from the Hub's: ``gate_up_proj`` as
[experts, 2 × intermediate, hidden] and ``down_proj`` as [experts, hidden, intermediate]. It transposes
on load but saves (and hands out in ``state_dict()``) its own layout, which vLLM's Qwen3-VL-MoE loader
(``is_fused_checkpoint_transposed=True``) cannot load. The tiny builder and a weight refresh of a vLLM
engine both go through :func:`hub_expert_layout`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["FUSED_EXPERTS", "hub_expert_layout"]

#: name endings of the fused expert tensors whose last two dimensions the Hub stores swapped
FUSED_EXPERTS = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")


def hub_expert_layout(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with its fused expert tensors transposed to the Hub's layout (the others as they are).

    The transpose is its own inverse, so this also turns a Hub checkpoint into transformers' layout.
    """
    return {
        name: tensor.transpose(1, 2).contiguous() if name.endswith(FUSED_EXPERTS) else tensor
        for name, tensor in state.items()
    }
