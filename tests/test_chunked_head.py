"""The LM head applied chunk by chunk (``token_stats(..., head=)``): the log-probs, entropies and
gradients of the whole logits, while no more than one chunk's logits exist at once."""

from __future__ import annotations

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
