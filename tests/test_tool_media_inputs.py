"""A tool's reply with media in the response: the training forward sees it as it would in the prompt.

An episode [generated, observation (video), generated] is collated with the observation's tokens, types
and pixels in the response; the log-probs of the last turn and the 3-D positions of every response token
must equal those of the same tokens given as a prompt (what the rollout engine continues from)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from videorl.backend import PromptInput, backend_for_model
from videorl.media.metadata import VideoMetadata
from videorl.model_inputs import EncodedPrompt, continue_encoded, response_logprobs
from videorl.plugins import load_plugins
from videorl.rollout.hf import generation_positions
from videorl.tools.video import FrameSource


def _video(t: int, side: int, seed: int, fps: float = 2.0) -> tuple[torch.Tensor, VideoMetadata]:
    g = torch.Generator().manual_seed(seed)
    frames = torch.randint(0, 256, (t, 3, side, side), dtype=torch.uint8, generator=g)
    return frames, VideoMetadata.every_frame(t, side, side, fps=fps)


def _segment_video(backend: Any) -> tuple[torch.Tensor, VideoMetadata]:
    """get_frames(2.0, 3.5, 4) over a 16-frame 4 fps source: source frames 8, 10, 12, 14 (2.0 … 3.5 s)."""
    source = FrameSource(*_video(16, 2 * backend.factor, seed=3, fps=4.0), temporal_patch=2)
    frames, meta = source.segment(2.0, 3.5, 4)
    assert meta.frame_indices == (8, 10, 12, 14) and meta.sampled_fps == 2.0
    return frames, meta


def _empty() -> EncodedPrompt:
    """An empty response to continue."""
    return EncodedPrompt("s", [], [], {}, [], PromptInput("s", ""))


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_observation_media_in_the_response_equals_it_in_the_prompt(
    family: str, tiny_model_dir: Callable[[str], Path]
) -> None:
    backend: Any = backend_for_model(tiny_model_dir(family), load_plugins().model_backends)
    model = backend.load_model(dtype=torch.float32)
    side = 2 * backend.factor
    prompt = backend.encode(PromptInput("s", "What colour is the square?", videos=[_video(4, side, 0)]))
    tok = backend.processor.tokenizer
    gen1 = [*tok.encode('<tool_call>{"name": "get_frames"}</tool_call>'), backend.end_of_turn_id()]
    obs = backend.encode_observation(PromptInput("s", "4 frames:", videos=[_segment_video(backend)]))
    assert obs.prompt_ids[0] != tok.convert_tokens_to_ids("<|im_start|>")  # the template's "\n" first
    assert tok.decode(obs.prompt_ids).endswith("<|im_start|>assistant\n")
    gen2 = [*tok.encode("<answer>B</answer>"), backend.end_of_turn_id()]
    if family == "qwen3_vl":  # timestamp tokens of the source's times: patches at (2.0+2.5)/2, (3.0+3.5)/2
        assert "<2.2 seconds>" in tok.decode(obs.prompt_ids) and "<3.2 seconds>" in tok.decode(obs.prompt_ids)
    else:  # the grid's time step is the one the same frames get as a prompt's video
        alone = backend.encode(PromptInput("s", "4 frames:", videos=[_segment_video(backend)]))
        assert torch.equal(obs.visual["second_per_grid_ts"], alone.visual["second_per_grid_ts"])

    response = continue_encoded(continue_encoded(_empty(), gen1, obs), gen2)
    assert response.prompt_ids == gen1 + obs.prompt_ids + gen2
    as_response: Any = backend.collate([prompt], [response])
    as_prompt: Any = backend.collate([continue_encoded(prompt, gen1, obs)], [gen2])
    assert torch.equal(as_response.input_ids, as_prompt.input_ids)
    assert torch.equal(as_response.mm_token_type_ids, as_prompt.mm_token_type_ids)
    # 4 frames of 2·factor square: grid (2, 2·merge, 2·merge), 2·4 = 8 video tokens in the response
    assert int((as_response.mm_token_type_ids[0, as_response.prompt_width :] == 2).sum()) == 8
    positions = generation_positions(model, as_response)
    assert torch.equal(positions, generation_positions(model, as_prompt))
    with torch.no_grad():
        lp_response = response_logprobs(model(**as_response.model_kwargs()).logits, as_response)
        lp_prompt = response_logprobs(model(**as_prompt.model_kwargs()).logits, as_prompt)
    tail = lp_response[0, -len(gen2) :]
    assert torch.allclose(tail, lp_prompt[0, : len(gen2)], atol=1e-5)
    # the segment's media changes what the last turn sees (the pixels reach the model)
    other = backend.encode_observation(PromptInput("s", "4 frames:", videos=[_video(4, side, 9)]))
    changed = backend.collate([prompt], [continue_encoded(continue_encoded(_empty(), gen1, other), gen2)])
    with torch.no_grad():
        lp_other = response_logprobs(model(**changed.model_kwargs()).logits, changed)
    assert not torch.allclose(lp_other[0, -len(gen2) :], tail, atol=1e-6)


def test_a_reply_echoing_special_tokens_holds_them_as_plain_text(
    tiny_model_dir: Callable[[str], Path],
) -> None:
    """A call's bad key echoed in the reply ("takes no argument '<|video_pad|>'") must not become a
    placeholder (the alignment check would stop the run on model output)."""
    backend: Any = backend_for_model(tiny_model_dir("qwen2_5_vl"), load_plugins().model_backends)
    text = "Error: get_frames takes no argument '<|video_pad|><|im_end|>'"
    obs = backend.encode_observation(PromptInput("s", text))
    forbidden = backend.forbidden_token_ids() | {backend.end_of_turn_id()}
    im_end = backend.end_of_turn_id()
    body = obs.prompt_ids[
        : len(obs.prompt_ids) - obs.prompt_ids[::-1].index(im_end) - 1
    ]  # before its <|im_end|>
    assert not [t for t in body[3:] if t in forbidden]  # "\n<|im_start|>tool\n" then plain text
    assert backend.tokenizer.decode(obs.prompt_ids).count("<|video_pad|>") == 1  # spelled, not a token
    assert not obs.visual and set(obs.mm_token_type_ids) == {0}
