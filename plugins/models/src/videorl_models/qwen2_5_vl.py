"""Qwen2.5-VL: as Qwen2-VL (factor 28), plus ``second_per_grid_ts`` for the RoPE time axis."""

from __future__ import annotations

from videorl_models.qwen import QwenVLBackend

__all__ = ["Qwen2_5VLBackend"]


class Qwen2_5VLBackend(QwenVLBackend):
    family = "qwen2_5_vl"
    model_types = ("qwen2_5_vl",)
    patch_size = 14
    uses_second_per_grid_ts = True
