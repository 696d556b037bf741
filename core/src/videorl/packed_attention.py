"""PyTorch sdpa that attends within each sequence of a packed row, at the cost of the sequences alone.

transformers keeps packed sequences apart (:mod:`videorl.packing`) with a block-diagonal mask for
sdpa: correct, but sdpa then computes the whole ``N × N`` score matrix of the row (``N`` the
micro-batch's tokens) and masks most of it — more work than the padded batch's ``B × L²`` once a
micro-batch holds several long sequences, and an ``N²`` boolean mask besides (400 MB at 20k
tokens). flash-attention's varlen kernel does only ``Σ Lᵢ²`` work, but it needs the flash-attn
package on a GPU. :func:`install_packed_sdpa` switches a text model from ``sdpa`` to
``videorl_sdpa_packed``: on a packed row (batch 1, no mask, counters that restart) it runs sdpa
once per sequence, causally, on exactly its tokens; every other call (padded batches, generation,
decoding with a cache) is plain sdpa with transformers' own mask, so their results are unchanged.
A model loaded with ``flash_attention_2``/``3`` keeps it (its varlen path reads the same counters).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["PACKED_SDPA", "install_packed_sdpa", "packed_lengths", "remember_packed_lengths"]

PACKED_SDPA = "videorl_sdpa_packed"

#: the lengths of the last counters seen or registered (every layer of a forward receives the same
#: tensor, or a view of it), under a weak reference and the tensor's version: a strong one would keep
#: the row's position ids in device memory after the forward; the version catches a change in place.
_last: tuple[weakref.ref[torch.Tensor] | None, int, list[int] | None] = (None, -1, None)


def remember_packed_lengths(position_ids: torch.Tensor, lengths: list[int]) -> None:
    """Record the sequence lengths of a packed row's ``position_ids`` (its counters, or the family's
    rows after them), known on the host when the row was built (:mod:`videorl.packing`): the
    attention then never reads them back from the device."""
    global _last
    _last = (weakref.ref(position_ids), position_ids._version, list(lengths) if len(lengths) > 1 else None)


def _recorded(counters: torch.Tensor) -> bool:
    """Whether ``counters`` are the registered tensor, or its first row as a view (the model picks
    the counters out of the family's rows): same storage start, same version."""
    ref, version, _ = _last
    known = ref() if ref is not None else None
    if known is None or counters._version != version:
        return False
    if counters is known:
        return True
    base = counters._base
    return (
        base is known
        and counters.data_ptr() == known.data_ptr()
        and counters.numel() == known.shape[-1]
        and counters.is_contiguous()
    )


def packed_lengths(counters: torch.Tensor | None) -> list[int] | None:
    """The sequence lengths of a packed row from its per-sequence token counters (``1 × N`` or ``N``:
    each sequence counts 0, 1, 2, ...), or ``None`` when the row holds a single sequence. Those of a
    row built by :mod:`videorl.packing` were recorded on the host (:func:`remember_packed_lengths`);
    others are read off the counters once (a device read back) and remembered."""
    global _last
    if counters is None:
        return None
    if _recorded(counters):
        return _last[2]
    import torch

    flat = counters.reshape(-1)
    starts = torch.nonzero(flat == 0).flatten().tolist()
    lengths = [b - a for a, b in zip(starts, [*starts[1:], flat.numel()])] if starts[:1] == [0] else []
    found = lengths if len(lengths) > 1 else None
    _last = (weakref.ref(counters), counters._version, found)
    return found


def _packed_sdpa(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    packed = attention_mask is None and query.shape[0] == 1 and query.shape[2] == key.shape[2]
    lengths = packed_lengths(
        position_ids if position_ids is not None and position_ids.shape[0] == 1 else None
    )
    if not packed or lengths is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    kwargs.pop("is_causal", None)
    pieces = zip(query.split(lengths, dim=2), key.split(lengths, dim=2), value.split(lengths, dim=2))
    # sdpa_attention_forward returns B × L × heads × dim: the sequences join along dim 1
    out = [sdpa_attention_forward(module, q, k, v, None, is_causal=True, **kwargs)[0] for q, k, v in pieces]
    return torch.cat(out, dim=1), None


def _packed_sdpa_mask(**kwargs: Any) -> Any:
    """sdpa's mask, except none for a row without padding, at its first position, as long as its keys
    (a packed row, or a plain unpadded batch): :func:`_packed_sdpa` applies causality itself."""
    from transformers.masking_utils import sdpa_mask

    q_offset = kwargs.get("q_offset")
    unpadded = kwargs.get("attention_mask") is None and kwargs.get("q_length") == kwargs.get("kv_length")
    if unpadded and isinstance(q_offset, int) and q_offset == 0:
        return None
    return sdpa_mask(**kwargs)


def install_packed_sdpa(text_model: Any) -> bool:
    """Switch ``text_model`` (a decoder stack without sliding-window layers) from ``sdpa`` to
    :data:`PACKED_SDPA`; ``False`` (left as it is) when it runs another attention implementation
    or has sliding-window layers (whose mask the shortcut above would drop)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    config = text_model.config
    sliding = getattr(config, "use_sliding_window", False) or "sliding_attention" in (
        getattr(config, "layer_types", None) or ()
    )
    if config._attn_implementation not in ("sdpa", PACKED_SDPA) or sliding:
        return False
    AttentionInterface.register(PACKED_SDPA, _packed_sdpa)
    AttentionMaskInterface.register(PACKED_SDPA, _packed_sdpa_mask)
    for module in text_model.modules():
        sub = getattr(module, "config", None)
        if sub is not None and getattr(sub, "_attn_implementation", None) == "sdpa":
            sub._attn_implementation = PACKED_SDPA
    return True
