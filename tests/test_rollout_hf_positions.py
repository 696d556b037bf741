"""The HF engine's position ids (:func:`videorl.rollout.hf.generation_positions`), computed by videorl
rather than by transformers' private ``_prepare_position_ids_for_generation``: left-padding counters
and, for Qwen-VL's M-RoPE, the model's public ``get_rope_index`` (the backend's rule); the log-probs of
every Qwen family's rollouts (video, image and text prompts of different lengths in one batch) equal the
training forward's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from videorl.backend import PromptInput, backend_for_model
from videorl.media.metadata import VideoMetadata
from videorl.model_inputs import response_logprobs
from videorl.plugins import load_plugins
from videorl.rollout import SamplingParams
from videorl.rollout.hf import HFEngine, generation_positions


def _prompts(backend: Any) -> list[Any]:
    """A video, a text-only and an image prompt, of three lengths (so the batch is left-padded)."""
    g = torch.Generator().manual_seed(0)
    side = 2 * backend.factor
    frames = torch.randint(0, 256, (4, 3, side, side), dtype=torch.uint8, generator=g)
    image = torch.randint(0, 256, (3, side, 3 * backend.factor), dtype=torch.uint8, generator=g)
    return [
        backend.encode(
            PromptInput(
                "video",
                "What colour is the square?",
                videos=[(frames, VideoMetadata.every_frame(4, side, side, fps=2.0))],
            )
        ),
        backend.encode(PromptInput("text", "Say hello.")),
        backend.encode(PromptInput("image", "Describe it.", images=[image])),
    ]


def test_positions_count_each_row_from_its_first_token_then_the_rope_rule(
    tiny_model_dir: Callable[[str], Path],
) -> None:
    backend = backend_for_model(tiny_model_dir("qwen2_5_vl"), load_plugins().model_backends)
    prompts = _prompts(backend)
    inputs = backend.collate(prompts)
    positions = generation_positions(backend.load_model(dtype=torch.float32), inputs)
    width = inputs.input_ids.shape[1]
    assert positions.shape == (4, 3, width)
    for row, prompt in enumerate(prompts):
        pad = width - len(prompt.prompt_ids)
        assert positions[0, row].tolist() == [0] * pad + list(range(len(prompt.prompt_ids)))
    assert torch.equal(positions[1:], backend.rope_positions(inputs))  # what the backend installed
    text = positions[:, 1]  # no visual item: the three rotary axes are the counters
    assert all(torch.equal(text[axis], text[0]) for axis in (1, 2, 3))
    # a video item takes fewer positions than tokens (the text after it resumes at its largest + 1)
    assert positions[1, 0, -1] < positions[0, 0, -1]


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_rollout_logprobs_equal_the_training_forward_for_every_qwen_family(
    family: str, tiny_model_dir: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = backend_for_model(tiny_model_dir(family), load_plugins().model_backends)
    model = backend.load_model(dtype=torch.float32)

    def private(*_: Any, **__: Any) -> Any:
        raise AssertionError("the engine used transformers' _prepare_position_ids_for_generation")

    monkeypatch.setattr(model, "_prepare_position_ids_for_generation", private)
    prompts = _prompts(backend)
    groups = HFEngine(backend, model).generate(prompts, SamplingParams(n=2, max_tokens=6, seed=3))
    flat = [(p, c) for p, g in zip(prompts, groups) for c in g]
    inputs = backend.collate([p for p, _ in flat], [c.token_ids for _, c in flat])
    with torch.no_grad():  # the training forward: the model computes its own positions
        logits = model(**inputs.model_kwargs()).logits
    expected = response_logprobs(logits, inputs, forbidden=backend.forbidden_token_ids())
    for row, (_, completion) in enumerate(flat):
        got = torch.tensor(completion.logprobs)
        torch.testing.assert_close(got, expected[row, : len(got)], atol=1e-5, rtol=0)
