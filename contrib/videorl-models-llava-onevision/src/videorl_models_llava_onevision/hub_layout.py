"""LLaVA-OneVision's weights under the names of its Hub checkpoints, which vLLM loads.

transformers 5 names the SigLIP tower's weights ``[model.]vision_tower.embeddings…`` (and loads both
spellings); the Hub checkpoints, and vLLM's ``LlavaOnevisionForConditionalGeneration`` (whose
``hf_to_vllm_mapper`` keeps the rest of the name), have ``vision_tower.vision_model.embeddings…``.
The tiny builder and a weight refresh of a vLLM engine both go through :func:`hub_key_names`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["hub_key_names"]

#: the tower's prefix as saved to disk and as the model's own ``state_dict()`` names it
_TOWER_PREFIXES = ("vision_tower.", "model.vision_tower.")
_HUB_INNER = "vision_model."


def _hub_name(name: str) -> str:
    for prefix in _TOWER_PREFIXES:
        if name.startswith(prefix):
            rest = name[len(prefix) :]
            return name if rest.startswith(_HUB_INNER) else prefix + _HUB_INNER + rest
    return name


def hub_key_names(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with the vision tower's weights renamed to ``…vision_tower.vision_model.*`` (tensors
    untouched; names already in the Hub's form, and all other weights, kept)."""
    return {_hub_name(name): tensor for name, tensor in state.items()}
