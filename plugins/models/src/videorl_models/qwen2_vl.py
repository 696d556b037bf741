"""Qwen2-VL: patch 14, merge 2 (factor 28), plain pads per video, 3-D RoPE without time scaling."""

from __future__ import annotations

from videorl_models.qwen import QwenVLBackend

__all__ = ["Qwen2VLBackend"]


class Qwen2VLBackend(QwenVLBackend):
    family = "qwen2_vl"
    model_types = ("qwen2_vl",)
    patch_size = 14
