"""The vision tower once per distinct prompt of a micro-batch, not once per response.

A prompt's ``n`` responses are ``n`` rows of a teacher-forced batch, and :func:`collate_encoded`
concatenates every row's pixels: the model's forward would encode the same video ``n`` times
(≈20–25 % of the update's FLOPs at ``n = 8`` on video prompts). :func:`share_prompt_visual` puts
each distinct prompt's pixels in once and records, per pixel field, which distinct item each item
of the batch uses (:attr:`ModelInputs.shared_items`); the grids stay per row, since the positions
(M-RoPE) and the placeholders of every row need them. The backend's optional ``vision_once(model,
inputs)`` hook (a context manager around the forward) runs the tower on the distinct items and
hands each item's embeddings to every row that uses it. The gradient is the per-row computation's:
autograd sums an embedding's uses, as it sums the ``n`` separate tower calls' weight gradients.

Two rows share pixels when their prompts hold the very same visual tensors (the ``n`` episodes of a
group share their :class:`EncodedPrompt`); a tool reply's media are the row's own and never shared.
A backend without the hook keeps the per-row path.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any

from videorl.model_inputs import EncodedPrompt, ModelInputs

__all__ = ["SHARED_PIXELS", "same_pixels", "share_prompt_visual", "vision_once"]

#: the pixel fields of :class:`ModelInputs` that may be shared, each with the grid whose rows count
#: its items (transformers' layout: a field's patches are its items' patches back to back)
SHARED_PIXELS = {"pixel_values": "image_grid_thw", "pixel_values_videos": "video_grid_thw"}


def same_pixels(encoded: EncodedPrompt) -> Hashable:
    """What makes two prompts' pixels the same: the same tensor objects (alive while they are
    compared); a prompt without pixels is only itself."""
    if not encoded.visual:
        return ("prompt", id(encoded))
    return tuple(sorted((k, id(v)) for k, v in encoded.visual.items()))


def share_prompt_visual(
    inputs: ModelInputs,
    encoded: Sequence[EncodedPrompt],
    responses: Sequence[Sequence[int] | EncodedPrompt],
) -> ModelInputs:
    """``inputs`` (``collate_encoded(encoded, responses=responses)``) with each distinct prompt's
    pixels once and :attr:`~ModelInputs.shared_items` set; ``inputs`` itself when no prompt repeats.

    The parts are laid out as :func:`collate_encoded` lays them (a row's prompt, then its response's
    media), the repeated prompts' parts left out: item ``i`` of a field uses distinct item
    ``shared_items[field][i]``."""
    import torch

    keys = [same_pixels(e) for e in encoded]
    if len(set(keys)) == len(keys):
        return inputs
    parts: list[tuple[Sequence[int] | EncodedPrompt, Any]] = []
    for prompt, response, key in zip(encoded, responses, keys):
        parts += [(prompt, key), (response, None)]  # collate_encoded's order; a reply's media are its own
    values: dict[str, Any] = {}  # pixel fields of ModelInputs
    shared: dict[str, tuple[int, ...]] = {}
    for field, grid_key in SHARED_PIXELS.items():
        if getattr(inputs, field) is None:
            continue
        kept: list[torch.Tensor] = []
        items: list[int] = []
        seen: dict[Any, list[int]] = {}
        distinct = 0
        for part, key in parts:
            if not isinstance(part, EncodedPrompt) or field not in part.visual:
                continue
            if key is not None and key in seen:  # a repeated prompt: its first row's items
                items += seen[key]
                continue
            ids = list(range(distinct, distinct + int(part.visual[grid_key].shape[0])))
            distinct += len(ids)
            kept.append(part.visual[field])
            items += ids
            if key is not None:
                seen[key] = ids
        values[field] = torch.cat(kept)
        shared[field] = tuple(items)
    return replace(inputs, **values, shared_items=shared) if shared else inputs


def vision_once(
    backend: Any,
    model: Any,
    inputs: ModelInputs,
    encoded: Sequence[EncodedPrompt],
    responses: Sequence[Sequence[int] | EncodedPrompt],
) -> tuple[ModelInputs, AbstractContextManager[Any]]:
    """The batch to run and the context to run ``model`` in: with the backend's ``vision_once`` hook
    and a prompt in several rows, the shared batch (:func:`share_prompt_visual`) and the hook's
    context; else ``inputs`` as they are and no context."""
    hook = getattr(backend, "vision_once", None)
    if hook is None:
        return inputs, nullcontext()
    shared = share_prompt_visual(inputs, encoded, responses)
    if not shared.shared_items:
        return inputs, nullcontext()
    context: AbstractContextManager[Any] = hook(model, shared)
    return shared, context
