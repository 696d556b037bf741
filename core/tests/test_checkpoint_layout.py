"""A backend's optional ``checkpoint_layout``: what a vLLM engine's refresh gets, never the hf engine's."""

from __future__ import annotations

import torch

from videorl.actor.policy import Actor, refresh_state
from videorl.backend import hub_checkpoint_layout, missing_backend_members
from videorl.rollout.hf import HFEngine


class _Renaming:
    """A family whose Hub checkpoints name ``weight`` ``hub.weight``."""

    def checkpoint_layout(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {("hub." + k if k == "weight" else k): v for k, v in state.items()}


def test_the_member_is_optional_and_applied_when_present() -> None:
    assert "checkpoint_layout" not in missing_backend_members(object())
    state = {"weight": torch.ones(1)}
    assert hub_checkpoint_layout(object(), state) is state  # no member: transformers' layout is the Hub's
    assert list(hub_checkpoint_layout(_Renaming(), state)) == ["hub.weight"]


def test_a_vllm_engine_s_refresh_goes_in_the_hub_layout_and_the_hf_engine_s_as_it_is() -> None:
    model = torch.nn.Linear(3, 2)
    actor = Actor(model, torch.optim.SGD(model.parameters(), lr=0.1), backend=_Renaming())  # type: ignore[arg-type]

    class VLLMLike:
        weights_dtype = None

    class Group:  # a tensor-parallel group's engine (GroupedEngine) around an hf engine
        engine = HFEngine.__new__(HFEngine)

    assert sorted(refresh_state(actor, VLLMLike())) == ["bias", "hub.weight"]  # type: ignore[arg-type]
    assert sorted(refresh_state(actor, HFEngine.__new__(HFEngine))) == ["bias", "weight"]
    assert sorted(refresh_state(actor, Group())) == ["bias", "weight"]  # type: ignore[arg-type]
