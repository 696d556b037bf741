"""Padding-free (packed) teacher-forced batches: a micro-batch's sequences concatenated into one row.

A padded micro-batch (:class:`~videorl.model_inputs.ModelInputs`) computes on ``B × max length``
positions; when video prompts vary several-fold in length most of them are padding. A
:class:`PackedInputs` holds the same sequences back to back in one ``1 × N`` row (``N`` the sum of
their lengths) and keeps them apart through the position ids alone, as transformers' packed-sequence
support expects (``attention_mask=None``):

- row 0 of ``position_ids`` counts each sequence's tokens from 0 (a reset marks a boundary).
  transformers builds a block-diagonal causal mask from these resets for sdpa, eager and flex
  attention (``masking_utils.find_packed_sequence_indices``), and flash-attention 2/3 runs its
  varlen kernel from them (``_is_packed_sequence`` → ``cu_seqlens``), so the implementation the
  model was loaded with selects the right path by construction (the flash path has not run on a
  GPU here: the tests run sdpa and eager on CPU); sdpa models run
  :mod:`videorl.packed_attention` instead of the ``N × N`` block mask;
- the further rows are the family's own positions of each sequence (Qwen-VL: the 3-D M-RoPE
  positions of the padded batch, gathered), which the model then uses instead of computing its own
  over the whole row.

Visual tensors are unchanged: they are concatenated in sample order, and so are the placeholders
of the packed row. The LM head runs only on the positions that predict response tokens
(``logits_to_keep`` as an index tensor); :meth:`PackedInputs.response_stats` returns the log-probs
and entropies as ``B × R`` with the padded batch's layout, zeros where its response mask is 0.

A backend opts in by implementing ``pack_inputs(inputs) -> PackedInputs`` (with
:func:`pack_model_inputs`); :func:`pack_for_backend` falls back to padding (``None``) for one that
does not, or that sets ``packing_unsupported`` to the reason, and says so once per family.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from videorl.model_inputs import ModelInputs, pinned_upload, token_stats
from videorl.packed_attention import remember_packed_lengths

if TYPE_CHECKING:
    import torch

__all__ = ["PackedInputs", "pack_for_backend", "pack_model_inputs"]

log = logging.getLogger(__name__)

_warned: set[str] = set()


@dataclass
class PackedInputs:
    """The sequences of ``padded`` in one row (see the module docstring).

    ``position_ids`` is ``(1 + k) × 1 × N``: the per-sequence token counters, then the family's
    ``k`` rows (none for a 1-D rotary model: then it is ``1 × N``); the sequence lengths are read off
    the counters (:func:`~videorl.packed_attention.packed_lengths`, as the attention does).
    ``logits_index`` (``M``) are the packed positions whose logits predict the ``M`` response tokens
    ``targets`` (``1 × M``), in the row-major order of ``padded.response_mask``.
    """

    padded: ModelInputs
    input_ids: torch.Tensor
    position_ids: torch.Tensor
    mm_token_type_ids: torch.Tensor | None
    logits_index: torch.Tensor
    targets: torch.Tensor

    def model_kwargs(self) -> dict[str, Any]:
        """Arguments for the model's ``forward``: the packed row, its positions, the visual tensors
        of the padded batch, no attention mask (the positions carry the boundaries)."""
        skip = {"input_ids", "attention_mask", "mm_token_type_ids"}
        kwargs = {k: v for k, v in self.padded.model_kwargs().items() if k not in skip}
        kwargs.update(input_ids=self.input_ids, position_ids=self.position_ids)
        if self.mm_token_type_ids is not None:
            kwargs["mm_token_type_ids"] = self.mm_token_type_ids
        return kwargs

    def response_stats(
        self,
        logits: torch.Tensor,
        *,
        forbidden: Iterable[int] = (),
        entropy_grad: bool = True,
        head: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs and entropies (``B × R``, float32) of the responses, as
        :func:`~videorl.model_inputs.response_stats` returns them for the padded batch.

        ``logits`` are the model's for :attr:`logits_index` (``1 × M × V``) or for the whole row
        (``1 × N × V``: a model without ``logits_to_keep``); with ``head``, the hidden states at those
        positions, which ``head`` turns into logits chunk by chunk (:func:`token_stats`)."""
        if logits.shape[1] != self.logits_index.numel():
            logits = logits[:, self.logits_index.to(logits.device)]
        logp, entropy = token_stats(
            logits, self.targets.to(logits.device), forbidden=forbidden, entropy_grad=entropy_grad, head=head
        )
        mask = self.padded.response_mask
        assert mask is not None  # pack_model_inputs requires responses
        keep = mask.to(logp.device).bool()
        return (
            logp.new_zeros(keep.shape).masked_scatter(keep, logp[0]),
            entropy.new_zeros(keep.shape).masked_scatter(keep, entropy[0]),
        )


def pack_model_inputs(inputs: ModelInputs, positions: torch.Tensor | None = None) -> PackedInputs:
    """Pack a teacher-forced batch (prompts and responses, as a backend's ``collate`` builds it).

    ``positions`` (``k × B × L``, optional) are the family's positions of the padded batch, each
    sequence counted from its first real token (Qwen-VL: the 3-D M-RoPE positions); they are
    gathered into the packed row after the per-sequence token counters.

    Every index is built on the host from the batch's token counts (:meth:`ModelInputs.row_lengths`,
    known when the batch was collated) and uploaded once: no boolean mask or ``.tolist()`` reads a
    device tensor back, which would stall the host until the device caught up, once per forward."""
    import torch

    if inputs.response_mask is None:
        raise ValueError("pack_model_inputs: these inputs have no responses (collate with responses=...)")
    counts = inputs.row_lengths()
    width, total = inputs.prompt_width, inputs.input_ids.shape[1]
    lengths = [p + r for p, r in counts]
    keep = torch.cat(
        [torch.arange(i * total + width - p, i * total + width + r) for i, (p, r) in enumerate(counts)]
    )
    targets = torch.cat(
        [torch.arange(i * total + width, i * total + width + r) for i, (_, r) in enumerate(counts)]
    )
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    # the prompt's last token predicts the first response token
    index = torch.cat([torch.arange(a + p - 1, a + p - 1 + r) for a, (p, r) in zip(starts, counts)])
    counters = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    device = inputs.input_ids.device
    keep, targets, index, counters = (_upload(t, device) for t in (keep, targets, index, counters))
    rows = [counters.unsqueeze(0)]
    if positions is not None:
        if positions.shape[1:] != inputs.input_ids.shape:
            raise ValueError(
                f"pack_model_inputs: positions of shape {tuple(positions.shape)} for a batch of "
                f"{tuple(inputs.input_ids.shape)}; expected k × B × L"
            )
        flat = positions.to(device).reshape(positions.shape[0], -1)
        rows.append(flat.index_select(1, keep).unsqueeze(1))
    ids = inputs.input_ids.reshape(-1)
    types = inputs.mm_token_type_ids
    position_ids = torch.cat(rows, dim=0) if positions is not None else counters
    remember_packed_lengths(position_ids, lengths)
    return PackedInputs(
        padded=inputs,
        input_ids=ids.index_select(0, keep).unsqueeze(0),
        position_ids=position_ids,
        mm_token_type_ids=types.reshape(-1).index_select(0, keep).unsqueeze(0) if types is not None else None,
        logits_index=index,
        targets=ids.index_select(0, targets).unsqueeze(0),
    )


def _upload(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host index tensor on ``device``, from pinned memory without blocking on CUDA."""
    if pinned_upload(device):
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def pack_for_backend(backend: Any, inputs: ModelInputs) -> PackedInputs | None:
    """``backend.pack_inputs(inputs)``, or ``None`` (pad instead) when the backend cannot pack: it has
    no ``pack_inputs``, or its ``packing_unsupported`` gives the reason. The reason is logged once per
    family."""
    pack = getattr(backend, "pack_inputs", None)
    reason = getattr(backend, "packing_unsupported", None) or (
        None if pack is not None else "the backend has no pack_inputs()"
    )
    if reason is not None or pack is None:
        family = str(getattr(backend, "family", type(backend).__name__))
        if family not in _warned:
            _warned.add(family)
            log.warning(
                "actor.padding_free: the %s backend cannot pack sequences (%s); its micro-batches are "
                "padded instead. Set actor.padding_free=false to silence this.",
                family,
                reason,
            )
        return None
    packed: PackedInputs = pack(inputs)
    return packed
