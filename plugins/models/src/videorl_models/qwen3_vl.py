"""Qwen3-VL (dense and MoE): patch 16 (factor 32), timestamped frames, DeepStack vision features.

Each temporal patch of a video becomes ``<t seconds><|vision_start|>pads<|vision_end|>``, where
``t`` is the mean source time of the frames in the patch (frame index / source fps), tokenised on
its own as vLLM does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from videorl_models.hub_layout import hub_expert_layout
from videorl_models.qwen import QwenVLBackend

if TYPE_CHECKING:
    import torch

    from videorl.api import VideoMetadata

__all__ = ["Qwen3VLBackend", "temporal_patch_seconds"]


def temporal_patch_seconds(meta: VideoMetadata, temporal_patch_size: int) -> list[float]:
    """Seconds of each temporal patch: the mean time of its first and last frame (odd counts padded)."""
    indices = list(meta.frame_indices)
    if len(indices) % temporal_patch_size:
        indices += [indices[-1]] * (temporal_patch_size - len(indices) % temporal_patch_size)
    times = [i / meta.source_fps for i in indices]
    return [
        (times[i] + times[i + temporal_patch_size - 1]) / 2 for i in range(0, len(times), temporal_patch_size)
    ]


class Qwen3VLBackend(QwenVLBackend):
    family = "qwen3_vl"
    model_types = ("qwen3_vl", "qwen3_vl_moe")
    patch_size = 16
    timestamped_frames = True

    def checkpoint_layout(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The MoE's fused experts in the Hub's (transposed) layout; a dense model has none."""
        return hub_expert_layout(state)

    def _video_tokens(self, grid: tuple[int, int, int], meta: VideoMetadata) -> list[int]:
        _, h, w = grid
        stamps = temporal_patch_seconds(meta, self.temporal_patch_size)
        start, end, pad = (
            self.token_ids["vision_start"],
            self.token_ids["vision_end"],
            self.token_ids["video"],
        )
        per_frame = h * w // self.merge_size**2
        tokens: list[int] = []
        for seconds in stamps:
            tokens += self.tokenizer.encode(f"<{seconds:.1f} seconds>", add_special_tokens=False)
            tokens += [start, *([pad] * per_frame), end]
        return tokens
