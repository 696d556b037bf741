"""share_prompt_visual: each distinct prompt's pixels once, every item mapped to the one it uses."""

from __future__ import annotations

import torch

from videorl.model_inputs import EncodedPrompt, PromptInput, collate_encoded
from videorl.shared_vision import share_prompt_visual, vision_once


def _encoded(name: str, videos: int, value: int) -> EncodedPrompt:
    """A prompt of ``videos`` 1×2×2 videos (4 patches each, all ``value``) and one token per video."""
    visual = {
        "pixel_values_videos": torch.full((4 * videos, 3), value, dtype=torch.uint8),
        "video_grid_thw": torch.tensor([[1, 2, 2]] * videos),
    }
    return EncodedPrompt(name, [7] * videos, [2] * videos, visual, [7] * videos, PromptInput(name, ""))


def test_repeated_prompts_keep_their_pixels_once_and_replies_their_own() -> None:
    a, b, reply = _encoded("a", 2, 1), _encoded("b", 1, 2), _encoded("a", 1, 3)
    encoded = [a, b, a, b]
    responses: list[list[int] | EncodedPrompt] = [[5], [5, 6], reply, [6]]
    inputs = collate_encoded(encoded, pad_token_id=0, responses=responses)
    assert inputs.pixel_values_videos is not None and inputs.pixel_values_videos.shape[0] == 4 * 7
    shared = share_prompt_visual(inputs, encoded, responses)
    # a's two videos (0, 1), b's (2), a again, the reply's own (3), b again; grids stay per row
    assert shared.shared_items == {"pixel_values_videos": (0, 1, 2, 0, 1, 3, 2)}
    assert shared.pixel_values_videos is not None
    assert shared.pixel_values_videos[:, 0].tolist() == [1] * 8 + [2] * 4 + [3] * 4
    assert torch.equal(shared.video_grid_thw, inputs.video_grid_thw)
    assert torch.equal(shared.input_ids, inputs.input_ids)


def test_nothing_shared_without_a_repeat_or_without_the_hook() -> None:
    a, b = _encoded("a", 1, 1), _encoded("b", 1, 2)
    copy = EncodedPrompt("a", a.prompt_ids, a.mm_token_type_ids, dict(a.visual), [], a.prompt)
    responses: list[list[int] | EncodedPrompt] = [[5], [5], [5]]
    inputs = collate_encoded([a, b, copy], pad_token_id=0, responses=responses)
    # another EncodedPrompt holding the same tensors is the same prompt
    assert share_prompt_visual(inputs, [a, b, copy], responses).shared_items == {
        "pixel_values_videos": (0, 1, 0)
    }
    distinct = collate_encoded([a, b], pad_token_id=0, responses=responses[:2])
    assert share_prompt_visual(distinct, [a, b], responses[:2]) is distinct
    same, context = vision_once(object(), None, inputs, [a, b, copy], responses)  # a backend without the hook
    assert same is inputs and not same.shared_items
    with context:
        pass
