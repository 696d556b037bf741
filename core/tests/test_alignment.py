"""Strict alignment checks and prompt-length filtering, on hand-built tensors."""

from __future__ import annotations

import pytest
import torch

from videorl.api import (
    AlignmentError,
    ConfigError,
    DataError,
    ModelInputs,
    check_alignment,
    check_batch_alignment,
    check_frames,
    check_image,
    check_response_tokens,
    check_same_prompt,
    filter_overlong,
    image_grid,
    mm_token_types,
    video_grid,
    visual_token_count,
)

IMG, VID = 7, 8


def test_grids_and_counts() -> None:
    assert video_grid((3, 3, 56, 84), patch_size=14, temporal_patch_size=2) == (2, 4, 6)
    assert video_grid((4, 3, 64, 64), patch_size=16, temporal_patch_size=2) == (2, 4, 4)
    assert image_grid((3, 28, 56), patch_size=14) == (1, 2, 4)
    assert visual_token_count([(2, 4, 6), (1, 2, 4)], merge_size=2) == 12 + 2
    assert mm_token_types([1, IMG, VID, VID, 2], IMG, VID) == [0, 1, 2, 2, 0]


def test_frame_and_image_checks() -> None:
    check_frames("s", torch.zeros(1, 3, 56, 28, dtype=torch.uint8), 28)
    with pytest.raises(DataError, match=r"sample 's', video 2: the frames are 60×28 pixels.*multiples of 28"):
        check_frames("s", torch.zeros(1, 3, 60, 28, dtype=torch.uint8), 28, index=2)
    with pytest.raises(DataError, match=r"T×3×H×W tensor with T ≥ 1, got shape \(0, 3, 28, 28\)"):
        check_frames("s", torch.zeros(0, 3, 28, 28, dtype=torch.uint8), 28)
    with pytest.raises(DataError, match="must be uint8"):
        check_frames("s", torch.zeros(1, 3, 28, 28), 28)
    with pytest.raises(DataError, match=r"image 0: the image is 16×32 pixels"):
        check_image("s", torch.zeros(3, 16, 32, dtype=torch.uint8), 32)


def test_check_alignment_names_sample_counts_and_cause() -> None:
    ids = [1] + [VID] * 12 + [2]
    check_alignment("s", ids, token_id=VID, grids=[(2, 4, 6)], merge_size=2, modality="video")
    with pytest.raises(
        AlignmentError,
        match=(
            r"sample 's': 12 video placeholder tokens \(id 8\) but 16 video features.*cut by a length limit"
        ),
    ):
        check_alignment("s", ids, token_id=VID, grids=[(2, 4, 8)], merge_size=2, modality="video")
    with pytest.raises(AlignmentError, match="13 video placeholder.*a sampled <|video_pad|> in a response"):
        check_alignment("s", [*ids, VID], token_id=VID, grids=[(2, 4, 6)], merge_size=2, modality="video")


def _batch(
    ids: list[list[int]],
    types: list[list[int]] | None,
    images: list[list[int]] | None,
    videos: list[list[int]] | None,
) -> ModelInputs:
    t = torch.tensor(ids)
    return ModelInputs(
        sample_ids=[f"s{i}" for i in range(len(ids))],
        input_ids=t,
        attention_mask=torch.ones_like(t),
        mm_token_type_ids=None if types is None else torch.tensor(types),
        image_grid_thw=None if images is None else torch.tensor(images),
        video_grid_thw=None if videos is None else torch.tensor(videos),
    )


def test_batch_alignment_assigns_grids_in_order() -> None:
    ids = [[1, VID, VID, IMG, 1], [VID, 1, 1, 1, 1]]
    types = [mm_token_types(r, IMG, VID) for r in ids]
    ok = _batch(ids, types, [[1, 2, 2]], [[1, 2, 4], [1, 2, 2]])
    check_batch_alignment(ok, image_token_id=IMG, video_token_id=VID, merge_size=2)
    short = _batch(ids, types, [[1, 2, 2]], [[1, 2, 4]])
    with pytest.raises(
        AlignmentError,
        match=r"sample 's1': 1 video placeholder tokens but the video grids available to it \(none\) imply 0",
    ):
        check_batch_alignment(short, image_token_id=IMG, video_token_id=VID, merge_size=2)
    extra = _batch(ids, types, [[1, 2, 2], [1, 2, 2]], [[1, 2, 4], [1, 2, 2]])
    with pytest.raises(
        AlignmentError, match=r"1 image grid\(s\) \[\[1, 2, 2\]\] \(1 features\) have no placeholder"
    ):
        check_batch_alignment(extra, image_token_id=IMG, video_token_id=VID, merge_size=2)
    missing = _batch(ids, None, [[1, 2, 2]], [[1, 2, 4], [1, 2, 2]])
    with pytest.raises(AlignmentError, match="without mm_token_type_ids"):
        check_batch_alignment(missing, image_token_id=IMG, video_token_id=VID, merge_size=2)
    check_batch_alignment(
        missing, image_token_id=IMG, video_token_id=VID, merge_size=2, require_mm_token_type_ids=False
    )
    wrong = _batch(ids, [[0, 2, 2, 0, 0], types[1]], [[1, 2, 2]], [[1, 2, 4], [1, 2, 2]])
    with pytest.raises(
        AlignmentError,
        match=r"sample 's0': mm_token_type_ids\[3\] is 0 but the token there \(id 7\) is of type 1",
    ):
        check_batch_alignment(wrong, image_token_id=IMG, video_token_id=VID, merge_size=2)


def test_responses_and_engine_prompts() -> None:
    check_response_tokens("s", [1, 2, 3], {VID})
    with pytest.raises(
        AlignmentError,
        match=r"sample 's': the response contains 2 token\(s\).*id 8 at position 1, id 8 at position 3",
    ):
        check_response_tokens("s", [1, VID, 2, VID], {VID, IMG})
    check_same_prompt("s", [1, 2, 3], [1, 2, 3], where="vLLM")
    with pytest.raises(
        AlignmentError,
        match=(
            r"vLLM used prompt ids .*\(4 vs 3 tokens, first difference at position 1: \[9, 9, 3\] vs \[2, "
            r"3\]\)"
        ),
    ):
        check_same_prompt("s", [1, 2, 3], [1, 9, 9, 3], where="vLLM")


def test_filter_overlong() -> None:
    items = [("a", 10), ("b", 30), ("c", 20)]
    kept, dropped = filter_overlong(items, length=lambda x: x[1], sample_id=lambda x: x[0], limit=20)
    assert kept == [("a", 10), ("c", 20)]
    assert [(d.sample_id, d.tokens, d.limit) for d in dropped] == [("b", 30, 20)]
    with pytest.raises(DataError, match=r"1 prompt\(s\) exceed.*sample 'b': 30 prompt tokens > limit 20"):
        filter_overlong(items, length=lambda x: x[1], sample_id=lambda x: x[0], limit=20, on_overflow="fail")
    with pytest.raises(ConfigError, match="on_overflow"):
        filter_overlong(items, length=lambda x: x[1], sample_id=lambda x: x[0], limit=20, on_overflow="cut")  # type: ignore[arg-type]
