"""The vision tower once per distinct prompt of a micro-batch (``vision_once``): the same log-probs and
every gradient as the per-row computation, with a third of the tower's work for 3 responses a prompt."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import torch

from videorl.actor.update import forward_responses
from videorl.api import PromptInput
from videorl.data import Sample
from videorl.encoding import Prompt
from videorl.episode import Episode
from videorl.generation import Completion
from videorl.model_inputs import EncodedPrompt

ORDER = (0, 1, 0, 1, 1, 0)  # two prompts, three responses each, interleaved


def _prompt(backend: Any, encoded: EncodedPrompt) -> Prompt:
    sample = Sample(id=encoded.sample_id, data_type=encoded.prompt.data_type, problem="q", problem_type="x")
    return Prompt(sample, encoded, None)


def episodes(backend: Any, media: Any, *, per_row: bool) -> list[Episode]:
    """Six episodes over a video prompt and a video-and-image prompt; ``per_row``: each row holds its
    own copy of its prompt's pixels (equal values, other tensors), which the update does not share."""
    f = backend.factor
    encoded = [
        backend.encode(PromptInput("v", "What happens?", videos=[media.video(f, frames=4)])),
        backend.encode(PromptInput("vi", "Same?", videos=[media.video(f, seed=3)], images=[media.image(f)])),
    ]
    prompts = [_prompt(backend, e) for e in encoded]
    forbidden = backend.forbidden_token_ids()
    allowed = [i for i in range(len(backend.tokenizer)) if i not in forbidden]
    gen = torch.Generator().manual_seed(0)
    out = []
    for row, p in enumerate(ORDER):
        n = 3 + row % 3
        ids = [allowed[int(i)] for i in torch.randint(0, len(allowed), (n,), generator=gen)]
        prompt = prompts[p]
        if per_row:
            own = replace(encoded[p], visual={k: v.clone() for k, v in encoded[p].visual.items()})
            prompt = _prompt(backend, own)
        out.append(Episode(prompt, p, Completion(ids, [-1.0] * n, "stop")))
    return out


def run(model: Any, backend: Any, batch: list[Episode], padding_free: bool) -> dict[str, torch.Tensor]:
    """Log-probs and the gradient of every parameter of a loss over log-probs and entropies."""
    model.zero_grad(set_to_none=True)
    logp, entropy, mask = forward_responses(
        model, backend, batch, [], entropy_grad=True, padding_free=padding_free
    )
    ((logp + 0.1 * entropy) * mask).sum().backward()
    out = {"logp": (logp * mask).detach()}
    for name, p in model.named_parameters():
        out[name] = p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
    return out


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"])
@pytest.mark.parametrize("padding_free", [False, True])
def test_tower_once_per_prompt_equals_per_row(
    model_type: str,
    padding_free: bool,
    backend_for: Callable[[str], Any],
    model_for: Callable[[str], Any],
    media: Any,
) -> None:
    backend, model = backend_for(model_type), model_for(model_type)
    encoded: list[int] = []  # the items (grid rows) the tower encodes, per call
    handle = model.model.visual.register_forward_hook(
        lambda module, args, kwargs, out: encoded.append(int(kwargs["grid_thw"].shape[0])), with_kwargs=True
    )
    sync = None
    try:
        per_row = run(model, backend, episodes(backend, media, per_row=True), padding_free)  # transformers'
        per_row_items, encoded[:] = list(encoded), []
        sync = backend.install_vision_sync(model) if padding_free else None  # with and without the hooks
        once = run(model, backend, episodes(backend, media, per_row=False), padding_free)
    finally:
        handle.remove()
        if sync is not None:
            sync.remove()
    # per row: 6 videos and 3 images; once: the 2 prompts' 2 videos and 1 image, in one call
    assert sum(per_row_items) == 9
    assert encoded == [3]
    assert sync is None or sync.dummy_calls == 0
    torch.testing.assert_close(once["logp"], per_row["logp"], rtol=0, atol=1e-5)
    visual = 0
    for name, grad in per_row.items():
        if name == "logp":
            continue
        visual += name.startswith("model.visual.") and bool(grad.abs().sum() > 0)
        scale = float(grad.norm())
        assert float((once[name] - grad).norm()) <= 1e-5 * scale + 1e-9, name
    assert visual > 5  # the tower's weights have gradients, and they agree
