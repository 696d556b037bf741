"""The LM head taken out of the model's forward, to run chunk by chunk after it.

A packed micro-batch of short-prompt responses has ~20k response positions: the model's own LM head
would return their ``[tokens, vocab]`` logits at once (6 GB in bf16 at a 152k vocabulary, and as
much again for their gradient). :func:`head_outside` swaps the head for an identity while the model
runs, so its ``logits`` are the final hidden states of the kept positions, and hands back the head,
which :func:`~videorl.model_inputs.token_stats` applies one chunk of positions at a time.

Under FSDP2 the head belongs to the root unit, whose parameters stay unsharded from the forward
until the end of the backward: the head called after the forward uses the gathered weight and its
gradient reaches the root's reduce-scatter like the model's own call (run here on CPU with gloo; not
yet on a GPU)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

Head = Callable[[torch.Tensor], torch.Tensor]


@contextmanager
def head_outside(
    model: torch.nn.Module, compute_dtype: torch.dtype | None, mixed: bool
) -> Iterator[Head | None]:
    """While open, ``model(...).logits`` are hidden states; yields the head (run under the forward's
    autocast), or ``None`` where the model has no ``lm_head`` child (its logits stay its own)."""
    owner = next((m for m in model.modules() if isinstance(m._modules.get("lm_head"), torch.nn.Module)), None)
    if owner is None:
        yield None
        return
    lm_head = owner._modules["lm_head"]
    assert lm_head is not None
    device_type = next(model.parameters()).device.type

    def head(hidden: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type, dtype=compute_dtype, enabled=mixed):
            return lm_head(hidden)

    owner._modules["lm_head"] = torch.nn.Identity()
    try:
        yield head
    finally:
        owner._modules["lm_head"] = lm_head
