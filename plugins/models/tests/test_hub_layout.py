"""Qwen3-VL-MoE's fused experts in the Hub's layout (what vLLM loads), from transformers' own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from videorl_models.hub_layout import hub_expert_layout


def test_the_fused_experts_are_transposed_and_the_rest_kept() -> None:
    experts, hidden, inter = 2, 3, 4
    prefix = "model.language_model.layers.0.mlp."
    gate_up = torch.arange(experts * 2 * inter * hidden, dtype=torch.float32).reshape(
        experts, 2 * inter, hidden
    )
    down = torch.arange(experts * hidden * inter, dtype=torch.float32).reshape(experts, hidden, inter)
    gate = torch.ones(experts, hidden)
    state = {
        prefix + "experts.gate_up_proj": gate_up,
        prefix + "experts.down_proj": down,
        prefix + "gate.weight": gate,
    }

    hub = hub_expert_layout(state)

    assert hub[prefix + "experts.gate_up_proj"].shape == (experts, hidden, 2 * inter)
    assert hub[prefix + "experts.down_proj"].shape == (experts, inter, hidden)
    # expert 1, hidden unit 2, gate-up row 5 of transformers' [e, 2i, h] is at [e, h, 2i] in the Hub's
    assert hub[prefix + "experts.gate_up_proj"][1, 2, 5] == gate_up[1, 5, 2] == 1 * 24 + 5 * 3 + 2
    assert hub[prefix + "experts.down_proj"][1, 3, 0] == down[1, 0, 3] == 1 * 12 + 0 * 4 + 3
    assert hub[prefix + "experts.gate_up_proj"].is_contiguous()
    assert hub[prefix + "gate.weight"] is gate  # the router and everything else as they are
    back = hub_expert_layout(hub)  # its own inverse: a Hub checkpoint in transformers' layout
    assert all(torch.equal(back[name], tensor) for name, tensor in state.items())


def test_the_tiny_moe_s_state_dict_becomes_its_saved_hub_checkpoint(
    tiny_dir: Callable[[str], Path], backend_for: Callable[[str], Any]
) -> None:
    """transformers transposes the Hub layout on load; the backend's ``checkpoint_layout`` of the loaded
    model's ``state_dict()`` is the file on disk again, tensor for tensor."""
    from safetensors.torch import load_file

    backend = backend_for("qwen3_vl_moe")
    model = backend.load_model(dtype=torch.float32)
    saved = load_file(tiny_dir("qwen3_vl_moe") / "model.safetensors")
    hub = backend.checkpoint_layout(model.state_dict())
    assert set(hub) == set(saved)
    assert any(name.endswith("experts.gate_up_proj") for name in saved)
    assert all(torch.equal(hub[name], saved[name]) for name in saved)
