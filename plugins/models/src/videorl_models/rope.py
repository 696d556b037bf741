"""3-D (M-RoPE) position ids of Qwen-VL prompts, as the models were trained and as vLLM computes them.

Text tokens advance one position each; a visual item of ``t×h×w`` merged patches takes positions
``start + (t·interval, row, column)``, and the text after it resumes at **the largest position of
the item plus one**. transformers 5.x resumes at ``start + max(h, w)`` instead, which differs for
videos whose (time-scaled) temporal extent exceeds their spatial one — Qwen2.5-VL almost always,
Qwen2-VL on long low-resolution clips — so its rollout (vLLM) and training (HF) positions would
disagree. The backends therefore install :func:`mrope_positions` as the model's ``get_rope_index``,
used by both ``forward`` and ``generate``. Qwen3-VL/3.5 give each frame its own ``1×h×w`` item (the
frames are separated by timestamps), where both rules agree.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["install_rope_index", "mrope_positions"]


def mrope_positions(
    input_ids: torch.Tensor,
    mm_token_type_ids: torch.Tensor,
    image_grid_thw: torch.Tensor | None = None,
    video_grid_thw: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    second_per_grid_ts: torch.Tensor | None = None,
    *,
    merge_size: int,
    tokens_per_second: float | None = None,
    split_frames: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(position_ids 3×B×L, rope_deltas B×1)`` for a left- or right-padded batch.

    Each run of image (type 1) or video (type 2) tokens in ``mm_token_type_ids`` consumes the next
    grid of its modality; with ``split_frames`` every video grid is first split into ``t`` grids of
    one temporal patch. ``tokens_per_second`` (Qwen2.5-VL) scales the temporal axis of videos by
    ``tokens_per_second · second_per_grid_ts``. Padded positions get 0.
    """
    import torch

    device = input_ids.device
    videos = video_grid_thw
    seconds = second_per_grid_ts
    if videos is not None and split_frames:
        seconds = None if seconds is None else torch.repeat_interleave(seconds, videos[:, 0])
        videos = torch.repeat_interleave(videos, videos[:, 0], dim=0)
        videos[:, 0] = 1
    grids = {
        1: iter(image_grid_thw.tolist() if image_grid_thw is not None else []),
        2: iter(videos.tolist() if videos is not None else []),
    }
    video_seconds = iter(seconds.tolist() if seconds is not None else [])
    positions = torch.zeros(3, *input_ids.shape, dtype=torch.long, device=device)
    deltas = []
    for row in range(input_ids.shape[0]):
        keep = (
            attention_mask[row].bool()
            if attention_mask is not None
            else torch.ones(input_ids.shape[1], dtype=torch.bool, device=device)
        )
        types = mm_token_type_ids[row][keep].tolist()
        parts: list[torch.Tensor] = []
        start = 0
        for kind, group in itertools.groupby(types):
            length = len(list(group))
            if kind == 0:
                parts.append(torch.arange(length, device=device).expand(3, -1) + start)
                start += length
                continue
            t, h, w = next(grids[kind])
            h, w = h // merge_size, w // merge_size
            if t * h * w != length:
                raise ValueError(
                    f"batch row {row}: a run of {length} placeholder tokens meets a grid of {t * h * w} "
                    "features; check the prompt with the backend's alignment check first"
                )
            temporal = torch.arange(t, device=device).float()
            if kind == 2 and tokens_per_second is not None:
                temporal = temporal * tokens_per_second * float(next(video_seconds, 1.0))
            tt, hh, ww = torch.meshgrid(
                temporal.long(), torch.arange(h, device=device), torch.arange(w, device=device), indexing="ij"
            )
            item = torch.stack([tt, hh, ww]).reshape(3, -1) + start
            parts.append(item)
            start = int(item.max()) + 1
        row_positions = (
            torch.cat(parts, dim=1) if parts else torch.zeros(3, 0, dtype=torch.long, device=device)
        )
        positions[:, row, keep] = row_positions
        deltas.append((int(row_positions.max()) + 1 if parts else 0) - len(types))
    return positions, torch.tensor(deltas, device=device).unsqueeze(1)


def install_rope_index(
    model: Any, *, merge_size: int, split_frames: bool, tokens_per_second: float | None
) -> None:
    """Make ``model.model.get_rope_index`` compute :func:`mrope_positions` (forward and generate)."""
    inner = getattr(model, "model", model)

    def get_rope_index(
        input_ids: torch.Tensor,
        mm_token_type_ids: torch.Tensor,
        image_grid_thw: torch.Tensor | None = None,
        video_grid_thw: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        second_per_grid_ts: torch.Tensor | None = None,
        **_: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return mrope_positions(
            input_ids,
            mm_token_type_ids,
            image_grid_thw,
            video_grid_thw,
            attention_mask,
            second_per_grid_ts,
            merge_size=merge_size,
            tokens_per_second=tokens_per_second,
            split_frames=split_frames,
        )

    inner.get_rope_index = get_rope_index
