"""Response log-probs and entropies without the full-vocabulary logits of the whole batch: the LM
head on the response's positions only, log-softmax in recomputed chunks, entropy without a graph
when it only gets logged. Values and gradients equal the full computation's within 1e-6 (fp32)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from videorl.backend import PromptInput, backend_for_model
from videorl.media.metadata import VideoMetadata
from videorl.model_inputs import entropy_from_logits, mask_logits, response_logprobs, response_stats
from videorl.plugins import load_plugins


@pytest.fixture(scope="module")
def batch(tiny_model_dir: Callable[[str], Path]) -> tuple[Any, Any, Any]:
    backend = backend_for_model(tiny_model_dir("qwen2_5_vl"), load_plugins().model_backends)
    model = backend.load_model(dtype=torch.float32).train()
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (4, 3, 56, 56), dtype=torch.uint8, generator=g)
    meta = VideoMetadata.every_frame(4, 56, 56, fps=2.0)
    prompts = [
        backend.encode(PromptInput("v", "What colour?", videos=[(frames, meta)])),
        backend.encode(PromptInput("t", "Say hello.")),
    ]
    responses = [
        backend.tokenizer.encode(text, add_special_tokens=False)
        for text in ("<answer>the square is red</answer>", "hello")
    ]
    assert len(responses[0]) > len(responses[1]) > 0
    return backend, model, backend.collate(prompts, responses)


def _grads(model: Any) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out


def test_equal_to_the_full_logits_computation(batch: Any) -> None:
    backend, model, inputs = batch
    forbidden = sorted(backend.forbidden_token_ids())
    mask = inputs.response_mask.float()
    width, rwidth = inputs.prompt_width, inputs.response_mask.shape[1]

    logits = model(**inputs.model_kwargs()).logits  # what the update computed before
    logp0 = response_logprobs(logits, inputs, forbidden=forbidden)
    ent0 = entropy_from_logits(mask_logits(logits[:, width - 1 : width + rwidth - 1].float(), forbidden))
    ((logp0 * mask).sum() + 0.1 * (ent0 * mask).sum()).backward()
    grads0 = _grads(model)

    tail = model(**inputs.model_kwargs(), logits_to_keep=inputs.logits_to_keep).logits
    assert tail.shape[1] == rwidth + 1 < logits.shape[1]
    logp, ent = response_stats(tail, inputs, forbidden=forbidden, entropy_grad=True, chunk=3)  # 3 chunks
    ((logp * mask).sum() + 0.1 * (ent * mask).sum()).backward()
    grads = _grads(model)
    assert (logp0 - logp).abs().max() <= 1e-6 and (ent0 - ent).abs().max() <= 1e-6
    assert grads.keys() == grads0.keys()
    assert max(float((grads[k] - grads0[k]).abs().max()) for k in grads) <= 1e-6

    # entropy only logged: no graph through it, the log-prob gradients unchanged
    logp, ent = response_stats(
        tail.detach().requires_grad_(), inputs, forbidden=forbidden, entropy_grad=False
    )
    assert logp.requires_grad and not ent.requires_grad
    assert (ent0 - ent).abs().max() <= 1e-6
