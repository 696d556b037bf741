"""Every family: load from a directory, build inputs from frames, forward, generate, identity, log-probs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from videorl.api import PromptInput, check_response_tokens, response_logprobs, token_logprobs
from videorl_models.tiny import TINY_MODEL_TYPES

MODEL_TYPES = tuple(TINY_MODEL_TYPES)

QWEN3 = {"qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"}


def prompts(media: Any, factor: int) -> list[PromptInput]:
    video, image = media.video(factor), media.image(factor)
    return [
        PromptInput("video", "What colour is the square?", videos=[video]),
        PromptInput("text", "Which direction does the object move?"),
        PromptInput("image", "What colour is the square?", images=[image]),
        PromptInput("both", "Is the image in the video?", videos=[video], images=[image]),
    ]


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_backend_geometry_and_prompt_layout(
    model_type: str, backend_for: Callable[[str], Any], media: Any
) -> None:
    backend = backend_for(model_type)
    factor = 32 if model_type in QWEN3 else 28
    assert backend.factor == factor and backend.temporal_patch_size == 2 and backend.merge_size == 2
    enc = backend.encode(prompts(media, factor)[0])
    # 3 frames of 2×3 factor cells: ceil(3/2)=2 temporal patches, 4×6 patches, 2·4·6/4 = 12 tokens
    assert enc.video_grid_thw == [(2, 4, 6)]
    ids = backend.token_ids
    assert enc.prompt_ids.count(ids["video"]) == 12
    assert enc.mm_token_type_ids == [2 if t == ids["video"] else 0 for t in enc.prompt_ids]
    assert backend.prompt_length(prompts(media, factor)[0]) == len(enc.prompt_ids)
    text = backend.tokenizer.decode(enc.prompt_ids)
    if model_type in QWEN3:
        # source indices 0,10,20 at 10 fps, padded to 0,10,20,20: patches at (0+1)/2 and (2+2)/2 s
        frame = "<|vision_start|>" + "<|video_pad|>" * 6 + "<|vision_end|>"
        assert f"user\n<0.5 seconds>{frame}<2.0 seconds>{frame}What colour" in text
        assert enc.engine_prompt_ids.count(ids["vision_start"]) == 0  # the bare pad, as vLLM expects
    else:
        assert "user\n<|vision_start|>" + "<|video_pad|>" * 12 + "<|vision_end|>What colour" in text
        assert (
            backend.tokenizer.decode(enc.engine_prompt_ids).count(
                "<|vision_start|><|video_pad|><|vision_end|>"
            )
            == 1
        )
    if model_type == "qwen2_5_vl":
        # temporal_patch_size / (3 sampled of 30 source frames at 10 fps = 1 fps) = 2 s per patch
        assert enc.visual["second_per_grid_ts"].tolist() == [2.0]
    else:
        assert "second_per_grid_ts" not in enc.visual


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_prompt_ids_and_pixels_match_the_hf_processor(
    model_type: str, backend_for: Callable[[str], Any], media: Any
) -> None:
    """The processor, given the compact prompt the engine gets, expands it to our ids, with our pixels."""
    backend = backend_for(model_type)
    prompt = prompts(media, backend.factor)[3]
    enc = backend.encode(prompt)
    (frames, meta), image = prompt.videos[0], prompt.images[0]
    out = backend.processor(
        text=[backend.tokenizer.decode(enc.engine_prompt_ids)],
        videos=[frames],
        images=[image],
        return_tensors="pt",
        videos_kwargs={
            "video_metadata": [backend.hf_video_metadata(meta)],
            "do_resize": False,
            "do_sample_frames": False,
        },
        images_kwargs={"do_resize": False},
    )
    assert out["input_ids"][0].tolist() == enc.prompt_ids
    assert out["mm_token_type_ids"][0].tolist() == enc.mm_token_type_ids
    for key in ("image_grid_thw", "video_grid_thw"):
        assert torch.equal(out[key], enc.visual[key]), key
    # the pixels stay uint8 patches on the host; normalised where the model runs, they are the
    # processor's float32 pixels within float32 rounding
    on_device = backend.collate([enc]).to(device="cpu", dtype=torch.float32)
    for key in ("pixel_values", "pixel_values_videos"):
        assert enc.visual[key].dtype == torch.uint8, key
        assert out[key].dtype == getattr(on_device, key).dtype == torch.float32
        torch.testing.assert_close(getattr(on_device, key), out[key], rtol=1e-6, atol=1e-6)
    assert on_device.pixel_norm == {}


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_rollout_and_training_see_identical_prompts_and_grids(
    model_type: str, backend_for: Callable[[str], Any], media: Any
) -> None:
    backend = backend_for(model_type)
    encoded = [backend.encode(p) for p in prompts(media, backend.factor)]
    responses = [[50, 51, 52], [53], [54, 55], [56, 57, 58, 59]]
    training = backend.collate(encoded, responses)
    generation = backend.collate(encoded)
    image_grids, video_grids = [], []
    for row, enc in enumerate(encoded):
        request = backend.rollout_request(enc)
        assert request.prompt_ids == training.prompt_ids(row) == generation.prompt_ids(row) == enc.prompt_ids
        assert request.image_grid_thw == enc.image_grid_thw and request.video_grid_thw == enc.video_grid_thw
        assert len(request.multi_modal_data.get("video", [])) == len(enc.prompt.videos)
        assert request.vllm_prompt()["prompt_token_ids"] == enc.engine_prompt_ids
        if enc.prompt.videos:
            assert request.mm_processor_kwargs == {"do_resize": False, "do_sample_frames": False}
            frames, meta = request.multi_modal_data["video"][0]
            assert frames.shape == (3, 2 * backend.factor, 3 * backend.factor, 3)  # T×H×W×C for vLLM
            assert meta["frames_indices"] == [0, 10, 20] and meta["do_sample_frames"] is False
        image_grids += request.image_grid_thw
        video_grids += request.video_grid_thw
        assert training.response_mask[row].sum().item() == len(responses[row])
    for inputs in (training, generation):
        assert inputs.image_grid_thw.tolist() == [list(g) for g in image_grids]
        assert inputs.video_grid_thw.tolist() == [list(g) for g in video_grids]
    assert torch.equal(training.pixel_values_videos, generation.pixel_values_videos)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_generate_logprobs_equal_the_teacher_forced_forward(
    model_type: str, backend_for: Callable[[str], Any], model_for: Callable[[str], Any], media: Any
) -> None:
    backend, model = backend_for(model_type), model_for(model_type)
    encoded = [backend.encode(p) for p in prompts(media, backend.factor)]
    inputs = backend.collate(encoded)
    forbidden = sorted(backend.forbidden_token_ids())
    torch.manual_seed(0)
    out = model.generate(
        **inputs.model_kwargs(),
        max_new_tokens=6,
        do_sample=True,
        top_k=0,
        suppress_tokens=forbidden,
        output_logits=True,
        return_dict_in_generate=True,
    )
    generated = out.sequences[:, inputs.input_ids.shape[1] :]
    sampled = token_logprobs(torch.stack(out.logits, 1), generated)
    eos = backend.end_of_turn_id()  # what ends a turn of the chat template, and generation
    assert eos == backend.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert eos == model.generation_config.eos_token_id
    responses = []
    for row in generated.tolist():
        response = row[: row.index(eos) + 1] if eos in row else row
        check_response_tokens("sample", response, forbidden)
        responses.append(response)
    training = backend.collate(encoded, responses)
    with torch.no_grad():
        logits = model(**training.model_kwargs()).logits
    forced = response_logprobs(logits, training)
    mask = training.response_mask.bool()
    assert (forced[mask] - sampled[:, : forced.shape[1]][mask]).abs().max().item() < 1e-5


@pytest.mark.parametrize("model_type", ["qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_logprobs_do_not_depend_on_batch_padding(
    model_type: str, backend_for: Callable[[str], Any], model_for: Callable[[str], Any], media: Any
) -> None:
    backend, model = backend_for(model_type), model_for(model_type)
    video, text = (backend.encode(p) for p in prompts(media, backend.factor)[:2])
    response = [50, 51, 52, 53]
    alone = backend.collate([text], [response])
    padded = backend.collate([video, text], [[54], response])
    assert padded.prompt_width > alone.prompt_width  # the text prompt is left-padded in the batch
    with torch.no_grad():
        lp_alone = response_logprobs(model(**alone.model_kwargs()).logits, alone)[0]
        lp_batch = response_logprobs(model(**padded.model_kwargs()).logits, padded)[1]
    assert (lp_alone - lp_batch).abs().max().item() < 1e-5


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_forbidden_ids_cover_placeholders_and_padded_vocabulary(
    model_type: str, backend_for: Callable[[str], Any], media: Any
) -> None:
    backend = backend_for(model_type)
    forbidden = backend.forbidden_token_ids()
    vocab = backend.tokenizer.get_vocab()
    for tok in ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>"):
        assert vocab[tok] in forbidden
    n, padded = len(backend.tokenizer), backend.config["text_config"]["vocab_size"]
    assert padded > n and set(range(n, padded)) <= forbidden
    assert vocab["<|im_end|>"] not in forbidden and vocab["<answer>"] not in forbidden
    assert len(forbidden) == 5 + padded - n
