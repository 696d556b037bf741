"""One vision-tower call per forward: the zero-weighted dummy (text-only) and the joint image+video call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from videorl.api import PromptInput, response_logprobs


def _visual_params(model: Any) -> list[tuple[str, torch.Tensor]]:
    return [(n, p) for n, p in model.named_parameters() if ".visual." in f".{n}"]


def _loss(backend: Any, model: Any, prompts: list[PromptInput]) -> torch.Tensor:
    encoded = [backend.encode(p) for p in prompts]
    inputs = backend.collate(encoded, [[50, 51, 52]] * len(encoded))
    return -response_logprobs(model(**inputs.model_kwargs()).logits, inputs).mean()


@pytest.mark.parametrize("model_type", ["qwen2_5_vl", "qwen3_vl", "qwen3_5_moe"])
def test_text_only_batch_runs_a_zero_weighted_dummy(
    model_type: str, backend_for: Callable[[str], Any]
) -> None:
    backend = backend_for(model_type)
    model = backend.load_model().train()
    text = [PromptInput("text", "Which direction does the object move?")]
    with torch.no_grad():
        plain = model(**backend.collate([backend.encode(text[0])]).model_kwargs()).logits
    _loss(backend, model, text).backward()
    assert all(p.grad is None for _, p in _visual_params(model))  # without the sync: no gradient at all

    model.zero_grad(set_to_none=True)
    sync = backend.install_vision_sync(model)
    with torch.no_grad():
        synced = model(**backend.collate([backend.encode(text[0])]).model_kwargs()).logits
    assert sync.dummy_calls == 1
    assert torch.equal(plain, synced)  # the dummy adds exactly zero
    _loss(backend, model, text).backward()
    params = _visual_params(model)
    assert params and all(p.grad is not None and not p.grad.any() for _, p in params)
    if model_type == "qwen3_vl":
        assert any("deepstack" in n for n, _ in params)  # DeepStack mergers take part too
    sync.remove()


def test_video_batch_runs_no_dummy_and_trains_the_tower(
    backend_for: Callable[[str], Any], media: Any
) -> None:
    backend = backend_for("qwen2_5_vl")
    model = backend.load_model().train()
    sync = backend.install_vision_sync(model)
    video = PromptInput("video", "What colour?", videos=[media.video(backend.factor)])
    _loss(backend, model, [video, PromptInput("text", "Hi")]).backward()
    assert sync.dummy_calls == 0
    assert all(p.grad is not None for _, p in _visual_params(model))
    assert any(p.grad.abs().sum() > 0 for _, p in _visual_params(model))
    sync.remove()


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen3_vl"])
def test_images_and_videos_go_through_the_tower_in_one_call(
    model_type: str, backend_for: Callable[[str], Any], media: Any
) -> None:
    backend = backend_for(model_type)
    model = backend.load_model()
    f = backend.factor
    encoded = [
        backend.encode(PromptInput("video", "What colour?", videos=[media.video(f)])),
        backend.encode(PromptInput("image", "What colour?", images=[media.image(f)])),
    ]
    inputs = backend.collate(encoded, [[50, 51], [52, 53]])
    calls: list[int] = []
    counter = model.model.visual.register_forward_hook(lambda *_: calls.append(1))
    with torch.no_grad():
        separate = model(**inputs.model_kwargs()).logits
        assert len(calls) == 2  # transformers: one call for images, one for videos
        sync = backend.install_vision_sync(model)
        calls.clear()
        joint = model(**inputs.model_kwargs()).logits
    assert len(calls) == 1 and sync.dummy_calls == 0
    assert (joint - separate).abs().max().item() < 1e-5
    sync.remove()
    counter.remove()


@pytest.mark.parametrize("model_type", ["qwen2_5_vl", "qwen3_vl"])
def test_a_text_only_rank_reaches_exactly_the_parameters_a_video_rank_does(
    model_type: str, backend_for: Callable[[str], Any], media: Any
) -> None:
    backend = backend_for(model_type)
    model = backend.load_model().train()
    sync = backend.install_vision_sync(model)

    def with_grad(prompt: PromptInput) -> set[str]:
        model.zero_grad(set_to_none=True)
        _loss(backend, model, [prompt]).backward()
        return {n for n, p in model.named_parameters() if p.grad is not None}

    video = with_grad(PromptInput("v", "What colour?", videos=[media.video(backend.factor)]))
    text = with_grad(PromptInput("t", "Hi"))
    assert text == video and sync.dummy_calls == 1
    sync.remove()
