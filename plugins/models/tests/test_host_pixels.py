"""Pixels stay uint8 patches on the host until the device: what a prefetched prompt holds is a quarter
of the float32 pixels the processor returns, and normalised they are the processor's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from videorl.api import PromptInput


def test_prefetched_prompts_hold_uint8_patches_a_quarter_of_float32(
    backend_for: Callable[[str], Any], media: Any
) -> None:
    from videorl.data import Sample
    from videorl.encoding import Prefetcher

    backend = backend_for("qwen2_5_vl")  # factor 28: 3 frames of 56×84 pixels
    videos = {f"s{i}": media.video(backend.factor, seed=i) for i in range(2)}
    prefetcher = Prefetcher(lambda s: backend.encode(PromptInput(s.id, "Describe.", videos=[videos[s.id]])))
    samples = [Sample(sid, "video", "Describe.") for sid in videos]
    prefetcher.prefetch(samples)
    held = [prefetcher.get(s) for s in samples]
    prefetcher.close()
    # 3 frames padded to 4 (temporal patch 2) → grid 2×4×6 = 48 patches of 3·2·14·14 = 1,176 values
    for enc in held:
        assert enc.visual["pixel_values_videos"].dtype == torch.uint8
        assert enc.visual["pixel_values_videos"].nbytes == 48 * 1176
    pixel_bytes = sum(e.visual["pixel_values_videos"].nbytes for e in held)
    processor = backend.processor.video_processor
    reference = [
        processor(
            videos=[frames],
            video_metadata=[backend.hf_video_metadata(meta)],
            return_tensors="pt",
            **backend._processor_kwargs(),
        )["pixel_values_videos"]
        for frames, meta in videos.values()
    ]
    assert sum(r.nbytes for r in reference) == 4 * pixel_bytes == 4 * 2 * 48 * 1176
    for enc, ref in zip(held, reference):
        pixels = enc.pixel_norm["pixel_values_videos"].apply(enc.visual["pixel_values_videos"])
        torch.testing.assert_close(pixels, ref, rtol=1e-6, atol=1e-6)


def test_the_upload_normalises_once_and_casts_to_the_compute_dtype(
    backend_for: Callable[[str], Any], media: Any
) -> None:
    backend = backend_for("qwen3_vl")
    enc = backend.encode(PromptInput("v", "Describe.", videos=[media.video(backend.factor)]))
    inputs = backend.collate([enc])
    assert inputs.pixel_values_videos is not None and inputs.pixel_values_videos.dtype == torch.uint8
    moved = inputs.to(device="cpu", dtype=torch.bfloat16)
    assert moved.pixel_values_videos is not None and moved.pixel_values_videos.dtype == torch.bfloat16
    # Qwen3-VL: mean = std = 0.5, rescale 1/255 → 0 maps to -1, 255 to +1
    raw = inputs.pixel_values_videos.float()
    expected = (raw - 127.5) / 127.5
    torch.testing.assert_close(moved.pixel_values_videos.float(), expected.bfloat16().float())
    again = moved.to(device="cpu", dtype=torch.float32)  # already normalised: not a second time
    torch.testing.assert_close(again.pixel_values_videos, moved.pixel_values_videos.float())


def test_host_inputs_hand_the_model_normalised_pixels(backend_for: Callable[[str], Any], media: Any) -> None:
    """A batch given to the model without an upload (a CPU run) is normalised by ``model_kwargs``."""
    backend = backend_for("qwen2_vl")
    enc = backend.encode(PromptInput("v", "Describe.", videos=[media.video(backend.factor)]))
    inputs = backend.collate([enc])
    pixels = inputs.model_kwargs()["pixel_values_videos"]
    assert pixels.dtype == torch.float32
    torch.testing.assert_close(pixels, inputs.to(device="cpu").model_kwargs()["pixel_values_videos"])
