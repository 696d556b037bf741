"""Every family packs: a micro-batch in one row gives the padded forward's log-probs, entropies and gradients.

The micro-batch mixes a video row, an image row, a text row and a video-plus-image row of different
lengths (prompts 37 to 63 tokens, responses 1 to 9), so the padded forward pads every row and the
packed one has four sequences with their own 3-D positions, attention boundaries and (Qwen3.5)
linear-attention state. A control run with the boundaries removed must differ: the check can fail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from videorl.api import ModelInputs, PackedInputs, PromptInput, packed_lengths
from videorl.model_inputs import response_stats
from videorl_models.tiny import TINY_MODEL_TYPES

MODEL_TYPES = tuple(TINY_MODEL_TYPES)
RESPONSE_LENGTHS = (5, 9, 1, 3)


def sequences(backend: Any, media: Any) -> tuple[list[Any], list[list[int]]]:
    """The encoded prompts and the responses of the micro-batch."""
    f = backend.factor
    prompts = [
        PromptInput("video", "What colour is the square?", videos=[media.video(f, frames=4, seed=0)]),
        PromptInput("text", "How many objects are in the video? Answer with a number"),
        PromptInput("image", "Which direction", images=[media.image(f, rows=2, cols=2)]),
        PromptInput(
            "both",
            "the video shows",
            videos=[media.video(f, frames=2, rows=1, cols=2, seed=3)],
            images=[media.image(f)],
        ),
    ]
    gen = torch.Generator().manual_seed(0)
    forbidden = backend.forbidden_token_ids()
    allowed = torch.tensor([i for i in range(len(backend.tokenizer)) if i not in forbidden])
    responses = [
        allowed[torch.randint(0, len(allowed), (n,), generator=gen)].tolist() for n in RESPONSE_LENGTHS
    ]
    return [backend.encode(p) for p in prompts], responses


def micro_batch(backend: Any, media: Any) -> ModelInputs:
    return backend.collate(*sequences(backend, media))


def padded_stats(model: Any, inputs: ModelInputs) -> tuple[torch.Tensor, torch.Tensor]:
    out = model(**inputs.model_kwargs(), logits_to_keep=inputs.logits_to_keep, use_cache=False)
    return response_stats(out.logits, inputs)


def packed_stats(model: Any, packed: PackedInputs) -> tuple[torch.Tensor, torch.Tensor]:
    out = model(**packed.model_kwargs(), logits_to_keep=packed.logits_index, use_cache=False)
    return packed.response_stats(out.logits)


def grads(model: Any, logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    (logp * mask).sum().backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_packed_forward_equals_the_padded_one(
    model_type: str, backend_for: Callable[[str], Any], model_for: Callable[[str], Any], media: Any
) -> None:
    backend, model = backend_for(model_type), model_for(model_type)
    # sdpa per packed sequence (videorl.packed_attention), not over a block-diagonal N × N mask
    assert model.model.language_model.config._attn_implementation == "videorl_sdpa_packed"
    check_packed_forward(backend, model, media)


def check_packed_forward(backend: Any, model: Any, media: Any) -> None:
    inputs = micro_batch(backend, media)
    assert inputs.response_mask is not None
    mask = inputs.response_mask.bool()
    packed = backend.pack_inputs(inputs)
    lengths = inputs.attention_mask.sum(dim=1).tolist()
    assert packed_lengths(packed.position_ids[0]) == lengths and packed.input_ids.shape == (1, sum(lengths))
    assert inputs.input_ids.numel() > sum(lengths)  # the padded batch computes on padding

    logp, entropy = padded_stats(model, inputs)
    padded_grads = grads(model, logp, mask)
    packed_logp, packed_entropy = packed_stats(model, packed)
    packed_grads = grads(model, packed_logp, mask)

    assert (packed_logp - logp)[mask].abs().max() < 1e-5
    assert (packed_entropy - entropy)[mask].abs().max() < 1e-5
    assert (packed_logp[~mask] == 0).all()  # the padded layout, zeros off the responses
    torch.testing.assert_close(packed_grads, padded_grads, atol=1e-5, rtol=1e-4)

    # Control: the same row as one sequence (counters 0..N-1) attends across the boundaries.
    joined = PackedInputs(**{**vars(packed), "position_ids": packed.position_ids.clone()})
    joined.position_ids[0, 0] = torch.arange(joined.position_ids.shape[-1])
    with torch.no_grad():
        leaked = packed_stats(model, joined)[0]
    assert (leaked - logp)[mask].abs().max() > 1e-4


@pytest.mark.parametrize("model_type", ["qwen2_5_vl", "qwen3_vl"])
def test_packed_positions_are_those_of_each_sequence_alone(
    model_type: str, backend_for: Callable[[str], Any], media: Any
) -> None:
    backend = backend_for(model_type)
    encoded, responses = sequences(backend, media)
    packed = backend.pack_inputs(backend.collate(encoded, responses))
    start = 0
    lengths = packed_lengths(packed.position_ids[0])
    assert lengths is not None
    for enc, response, length in zip(encoded, responses, lengths, strict=True):
        alone = backend.rope_positions(backend.collate([enc], [response]))[:, 0]  # 3 × length, no padding
        segment = packed.position_ids[:, 0, start : start + length]
        assert segment[0].tolist() == list(range(length))  # the boundary counter restarts at 0
        assert torch.equal(segment[1:], alone)
        start += length
    # The text row (no media) runs 0..n-1 on all three axes, as a plain LM's positions.
    text = packed.position_ids[1:, 0, lengths[0] : lengths[0] + lengths[1]]
    assert text.tolist() == [list(range(lengths[1]))] * 3


@pytest.mark.parametrize("model_type", ["qwen2_5_vl", "qwen3_5"])
def test_eager_attention_packs_through_transformers_block_diagonal_mask(
    model_type: str, backend_for: Callable[[str], Any], tiny_dir: Callable[[str], Any], media: Any
) -> None:
    """transformers' own packed-sequence support (the mask built from the restarting counters), as a
    model loaded with eager (or flex) attention runs it."""
    from transformers import AutoModelForImageTextToText

    backend = backend_for(model_type)
    model = AutoModelForImageTextToText.from_pretrained(
        str(tiny_dir(model_type)), dtype=torch.float32, attn_implementation="eager"
    )
    backend.prepare_model(model)
    assert model.model.language_model.config._attn_implementation == "eager"  # left as it is
    check_packed_forward(backend, model, media)


@pytest.mark.parametrize("model_type", ["qwen3_5", "qwen3_5_moe"])
def test_qwen3_5_needs_its_linear_attention_run_per_sequence(
    model_type: str, backend_for: Callable[[str], Any], tiny_dir: Callable[[str], Any], media: Any
) -> None:
    from transformers import AutoModelForImageTextToText

    from videorl_models.qwen import QwenVLBackend

    backend = backend_for(model_type)
    inputs = micro_batch(backend, media)
    assert inputs.response_mask is not None
    mask = inputs.response_mask.bool()
    # The Qwen-VL preparation alone (3-D positions), without Qwen3.5's per-sequence linear attention:
    # the Gated DeltaNet state runs from one packed sequence into the next.
    model = AutoModelForImageTextToText.from_pretrained(str(tiny_dir(model_type)), dtype=torch.float32)
    QwenVLBackend.prepare_model(backend, model)
    with torch.no_grad():
        logp = padded_stats(model, inputs)[0]
        leaked = packed_stats(model, backend.pack_inputs(inputs))[0]
    assert (leaked - logp)[mask].abs().max() > 1e-5
