"""The LM head applied chunk by chunk (``token_stats(..., head=)``): the log-probs, entropies and
gradients of the whole logits, while no more than one chunk's logits exist at once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from videorl.model_inputs import token_stats


def test_the_chunked_head_equals_the_whole_logits_with_gradients() -> None:
    torch.manual_seed(0)
    batch, positions, hidden, vocab, chunk = 2, 11, 16, 50, 4
    head = torch.nn.Linear(hidden, vocab, bias=False, dtype=torch.float64)
    states = torch.randn(batch, positions, hidden, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, vocab - 2, (batch, positions))
    forbidden = [vocab - 1, vocab - 2, vocab + 5]  # one beyond the vocabulary is ignored

    def loss_and_grads(**how: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        states.grad, head.weight.grad = None, None
        logp, entropy = token_stats(**how, targets=targets, forbidden=forbidden, entropy_grad=True)  # type: ignore[arg-type]
        (logp * 0.7 + entropy * 0.1).sum().backward()
        assert states.grad is not None and head.weight.grad is not None
        return logp.detach(), entropy.detach(), states.grad.clone(), head.weight.grad.clone()

    whole = loss_and_grads(step_logits=head(states), chunk=positions)
    widest: list[int] = []

    def recording_head(x: torch.Tensor) -> torch.Tensor:
        widest.append(x.shape[0] * x.shape[1])
        return head(x)

    chunked = loss_and_grads(step_logits=states, head=recording_head, chunk=chunk)
    for a, b in zip(whole, chunked):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert torch.isfinite(whole[0]).all()
    # the head ran on one chunk of positions at a time, forward and recomputed in backward
    assert max(widest) == batch * chunk and len(widest) == 2 * -(-positions // chunk)


def test_the_chunked_head_without_gradients_builds_no_graph() -> None:
    head = torch.nn.Linear(8, 20, bias=False)
    states = torch.randn(1, 5, 8)
    with torch.no_grad():
        logp, entropy = token_stats(states, torch.zeros(1, 5, dtype=torch.long), head=head, chunk=2)
    assert not logp.requires_grad and not entropy.requires_grad
    expected = torch.log_softmax(head(states).detach().float(), dim=-1)[..., 0]
    torch.testing.assert_close(logp, expected)


def test_the_model_hands_back_hidden_states_and_its_head_while_the_head_is_outside(
    tiny_model_dir: Callable[[str], Path],
) -> None:
    """``head_outside``: the model's ``logits`` are its final hidden states at the kept positions, the
    head yielded turns them into the model's own logits, and the head is back in place afterwards;
    the response log-probs and the gradients equal those of the model's own logits."""
    from videorl.actor.head import head_outside
    from videorl.api import PromptInput, backend_for_model
    from videorl.model_inputs import response_stats
    from videorl.plugins import load_plugins

    backend = backend_for_model(tiny_model_dir("qwen2_5_vl"), load_plugins().model_backends)
    model = backend.load_model(dtype=torch.float32)
    inputs = backend.collate([backend.encode(PromptInput("t", "Say hello."))], [[5, 6, 7, 8]])
    kwargs = {**inputs.model_kwargs(), "logits_to_keep": inputs.logits_to_keep}
    own = model(**kwargs).logits
    want = response_stats(own, inputs)
    want[0].sum().backward()
    want_grad = model.lm_head.weight.grad.clone()
    model.zero_grad()
    lm_head = model.lm_head
    with head_outside(model, None, False) as head:
        hidden = model(**kwargs).logits
    assert head is not None and model.lm_head is lm_head
    assert hidden.shape[-1] == model.config.get_text_config().hidden_size
    torch.testing.assert_close(head(hidden), own, rtol=0, atol=1e-6)
    got = response_stats(hidden, inputs, head=head, chunk=2)
    for a, b in zip(want, got):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    got[0].sum().backward()
    torch.testing.assert_close(model.lm_head.weight.grad, want_grad, rtol=0, atol=1e-6)
