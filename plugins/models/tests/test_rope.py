"""3-D positions: the original Qwen rule (text resumes after the largest position of a visual item)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from videorl.api import PromptInput
from videorl_models.rope import mrope_positions

TXT, IMG, VID = 0, 1, 2  # mm_token_type_ids: text, image, video


def _row(types: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.arange(len(types)).unsqueeze(0)
    return ids, torch.tensor([types])


def test_qwen2_5_time_scaled_video() -> None:
    # text, text, a 2×4×4 video grid (2×2×2 merged tokens), text; 2 s per patch at 2 tokens/s: step 4
    ids, types = _row([TXT, TXT] + [VID] * 8 + [TXT])
    pos, delta = mrope_positions(
        ids,
        types,
        video_grid_thw=torch.tensor([[2, 4, 4]]),
        second_per_grid_ts=torch.tensor([2.0]),
        merge_size=2,
        tokens_per_second=2,
    )
    t_axis = [0, 1] + [2] * 4 + [6] * 4 + [7]
    h_axis = [0, 1] + [2, 2, 3, 3] * 2 + [7]
    w_axis = [0, 1] + [2, 3, 2, 3] * 2 + [7]
    assert pos[:, 0].tolist() == [t_axis, h_axis, w_axis]  # transformers 5.19 resumes at 4, not 7
    assert delta.tolist() == [[8 - 11]]


def test_qwen2_long_video_at_low_resolution() -> None:
    # 6 temporal patches of 2×2 patches (one merged token each): the time axis is the longest
    ids, types = _row([TXT] + [VID] * 6 + [TXT, TXT])
    pos, delta = mrope_positions(ids, types, video_grid_thw=torch.tensor([[6, 2, 2]]), merge_size=2)
    assert pos[0, 0].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert pos[1, 0].tolist() == [0, 1, 1, 1, 1, 1, 1, 7, 8]
    assert delta.tolist() == [[9 - 9]]


def test_split_frames_image_and_left_padding() -> None:
    # row 0: pad, text, image (1×2×4 → 2 tokens), text; row 1: text, frame, text, frame, text
    ids = torch.zeros(2, 6, dtype=torch.long)
    types = torch.tensor([[TXT, TXT, IMG, IMG, TXT, TXT], [TXT, VID, TXT, VID, TXT, TXT]])
    mask = torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    pos, delta = mrope_positions(
        ids,
        types,
        image_grid_thw=torch.tensor([[1, 2, 4]]),
        video_grid_thw=torch.tensor([[2, 2, 2]]),
        attention_mask=mask,
        merge_size=2,
        split_frames=True,
    )
    assert pos[:, 0].tolist() == [[0, 0, 1, 1, 3, 4], [0, 0, 1, 1, 3, 4], [0, 0, 1, 2, 3, 4]]
    assert pos[:, 1].tolist() == [[0, 1, 2, 3, 4, 5]] * 3
    assert delta.tolist() == [[5 - 5], [6 - 6]]


def test_installed_on_every_family_and_equal_to_transformers_where_it_agrees(
    backend_for: Callable[[str], Any], model_for: Callable[[str], Any], media: Any
) -> None:
    for model_type in ("qwen3_vl", "qwen3_5"):
        backend, model = backend_for(model_type), model_for(model_type)
        prompt = PromptInput("v", "What?", videos=[media.video(32)], images=[media.image(32)])
        inputs = backend.collate([backend.encode(prompt), backend.encode(PromptInput("t", "Hi"))])
        args = (inputs.input_ids, inputs.mm_token_type_ids, inputs.image_grid_thw, inputs.video_grid_thw)
        ours = model.model.get_rope_index(*args, attention_mask=inputs.attention_mask)
        original = type(model.model).get_rope_index(model.model, *args, attention_mask=inputs.attention_mask)
        assert torch.equal(ours[0], original[0]) and torch.equal(ours[1], original[1])


def _odd_rate_video(media: Any, factor: int) -> tuple[Any, Any]:
    """8 frames of a 339-frame 10 fps source: 8.475 s per temporal patch. Patch 1 starts at
    1 · 2 tokens/s · 8.475 = 16.95 → position 16 in float32, but bfloat16 rounds 8.475 to 8.5 → 17."""
    from dataclasses import replace

    frames, meta = media.video(factor, frames=8, rows=1, cols=1)
    return frames, replace(meta, total_frames=339, duration=33.9)


def test_positions_under_the_bfloat16_policy_equal_the_engine_s(
    backend_for: Callable[[str], Any], media: Any, tmp_path: Any
) -> None:
    """FSDP2's bfloat16 policy must not cast ``second_per_grid_ts`` (the engine computes positions
    from the float32 seconds), nor may moving a batch to the compute dtype."""
    import torch.distributed as dist

    from videorl.actor.fsdp import shard_model

    backend = backend_for("qwen2_5_vl")
    encoded = backend.encode(PromptInput("v", "What?", videos=[_odd_rate_video(media, backend.factor)]))
    inputs = backend.collate([encoded], [[5, 6]])
    assert inputs.second_per_grid_ts is not None and inputs.second_per_grid_ts.dtype == torch.float32
    assert inputs.to(dtype=torch.bfloat16).second_per_grid_ts.dtype == torch.float32  # the hf engine's cast
    assert inputs.to(dtype=torch.bfloat16).pixel_values_videos.dtype == torch.bfloat16

    rope = {"merge_size": 2, "tokens_per_second": 2.0}
    args = (inputs.input_ids, inputs.mm_token_type_ids, None, inputs.video_grid_thw, inputs.attention_mask)
    engine = mrope_positions(*args, inputs.second_per_grid_ts, **rope)[0]
    rounded = mrope_positions(*args, inputs.second_per_grid_ts.to(torch.bfloat16), **rope)[0]
    assert not torch.equal(engine, rounded)  # the case does tell the two apart

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        model = shard_model(backend.load_model().train(), compute_dtype=torch.bfloat16)
        seen: list[torch.Tensor] = []
        inner = model.model
        original = inner.get_rope_index

        def recording(*a: Any, **k: Any) -> Any:
            out = original(*a, **k)
            seen.append(out[0])
            return out

        inner.get_rope_index = recording
        model(**inputs.model_kwargs())
    finally:
        dist.destroy_process_group()
    assert seen and torch.equal(seen[0], engine)
