"""LLaVA-OneVision's vision tower under its Hub checkpoints' names (what vLLM loads)."""

from __future__ import annotations

from typing import Any

import torch
from videorl_models_llava_onevision.hub_layout import hub_key_names


def test_the_tower_s_names_gain_vision_model_and_the_rest_are_kept() -> None:
    t = [torch.full((1,), float(i)) for i in range(5)]
    state = {
        "model.vision_tower.embeddings.patch_embedding.weight": t[0],  # the model's state_dict()
        "vision_tower.encoder.layers.0.mlp.fc1.weight": t[1],  # as transformers saves it
        "model.vision_tower.vision_model.post_layernorm.weight": t[2],  # already the Hub's
        "model.language_model.layers.0.mlp.up_proj.weight": t[3],
        "model.multi_modal_projector.linear_1.weight": t[4],
    }
    hub = hub_key_names(state)
    assert list(hub) == [
        "model.vision_tower.vision_model.embeddings.patch_embedding.weight",
        "vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight",
        "model.vision_tower.vision_model.post_layernorm.weight",
        "model.language_model.layers.0.mlp.up_proj.weight",
        "model.multi_modal_projector.linear_1.weight",
    ]
    assert all(a is b for a, b in zip(hub.values(), t))  # renamed, never copied
    assert hub_key_names(hub) == hub


def test_the_model_s_tower_weights_are_all_renamed(backend: Any, model: Any) -> None:
    state = model.state_dict()
    hub = backend.checkpoint_layout(state)
    tower = [name for name in hub if ".vision_tower." in f".{name}"]
    assert len(hub) == len(state) and tower
    assert all(name.startswith("model.vision_tower.vision_model.") for name in tower), tower[:3]
