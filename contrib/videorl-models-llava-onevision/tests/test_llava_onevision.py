"""The LLaVA-OneVision backend against the same contract as the Qwen-VL ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from videorl.api import (
    AlignmentError,
    DataError,
    ModelBackend,
    PromptInput,
    VideoMetadata,
    backend_for_model,
    response_logprobs,
    token_logprobs,
)


def video(
    frames: int = 4, height: int = 60, width: int = 80, seed: int = 0
) -> tuple[torch.Tensor, VideoMetadata]:
    gen = torch.Generator().manual_seed(seed)
    tensor = torch.randint(0, 256, (frames, 3, height, width), dtype=torch.uint8, generator=gen)
    return tensor, VideoMetadata.every_frame(frames, height, width, fps=1.0)


def test_registered_and_found_by_model_type(videorl_plugins: Any, tiny: Path) -> None:
    from videorl_models_llava_onevision import plugin

    registry = videorl_plugins(plugin).model_backends
    backend = backend_for_model(tiny, registry)
    assert backend.family == "llava_onevision" and isinstance(backend, ModelBackend)


def test_prompt_matches_the_hf_processor(backend: Any) -> None:
    prompt = PromptInput("v", "What colour is the square?", videos=[video()])
    enc = backend.encode(prompt)
    # 56×56 tower input, 14-pixel patches: 4×4 patches, pooled 2×2 = 4 tokens per frame, + 1 newline
    assert enc.prompt_ids.count(backend.video_token_id) == 4 * 4 + 1
    assert backend.prompt_length(prompt) == len(enc.prompt_ids)
    assert enc.mm_token_type_ids is None and enc.visual["pixel_values_videos"].shape == (1, 4, 3, 56, 56)
    out = backend.processor(
        text=[backend.tokenizer.decode(enc.engine_prompt_ids)],
        videos=[prompt.videos[0][0]],
        return_tensors="pt",
    )
    assert out["input_ids"][0].tolist() == enc.prompt_ids
    assert torch.equal(out["pixel_values_videos"], enc.visual["pixel_values_videos"])


def test_generate_logprobs_equal_the_teacher_forced_forward(backend: Any, model: Any) -> None:
    encoded = [
        backend.encode(PromptInput("v", "What colour?", videos=[video()])),
        backend.encode(PromptInput("t", "Which direction?")),
    ]
    inputs = backend.collate(encoded)
    for row, enc in enumerate(encoded):
        assert backend.rollout_request(enc).prompt_ids == inputs.prompt_ids(row) == enc.prompt_ids
    torch.manual_seed(0)
    out = model.generate(
        **inputs.model_kwargs(),
        max_new_tokens=5,
        do_sample=True,
        top_k=0,
        output_logits=True,
        return_dict_in_generate=True,
        suppress_tokens=sorted(backend.forbidden_token_ids()),
    )
    generated = out.sequences[:, inputs.input_ids.shape[1] :]
    sampled = token_logprobs(torch.stack(out.logits, 1), generated)
    training = backend.collate(encoded, generated.tolist())
    with torch.no_grad():
        forced = response_logprobs(model(**training.model_kwargs()).logits, training)
    assert (forced - sampled).abs().max().item() < 1e-5


def _with_grad(backend: Any, model: Any, prompt: PromptInput) -> set[str]:
    model.zero_grad(set_to_none=True)
    inputs = backend.collate([backend.encode(prompt)], [[40, 41]])
    (-response_logprobs(model(**inputs.model_kwargs()).logits, inputs).mean()).backward()
    return {n for n, p in model.named_parameters() if p.grad is not None}


def test_text_only_forward_runs_the_dummy_and_reaches_the_same_parameters(backend: Any) -> None:
    model = backend.load_model().train()
    text = PromptInput("t", "Hi")
    without = _with_grad(backend, model, text)
    sync = backend.install_vision_sync(model)
    with_video = _with_grad(backend, model, PromptInput("v", "What?", videos=[video()]))
    assert sync.dummy_calls == 0
    with_dummy = _with_grad(backend, model, text)
    assert sync.dummy_calls == 1
    assert with_dummy == with_video and with_video - without  # the tower's parameters, now on every rank
    zeros = [p.grad for n, p in model.named_parameters() if n in with_video - without]
    assert all(not g.any() for g in zeros)
    sync.remove()


def test_bad_inputs(backend: Any) -> None:
    with pytest.raises(DataError, match="does not support images"):
        backend.encode(PromptInput("i", "x", images=[torch.zeros(3, 56, 56, dtype=torch.uint8)]))
    with pytest.raises(AlignmentError, match="2 <video> placeholder"):
        backend.encode(PromptInput("l", "Is <video> a token?", videos=[video()]))
    short, long = (backend.encode(PromptInput(s, "x", videos=[video(n)])) for s, n in (("a", 2), ("b", 4)))
    with pytest.raises(DataError, match=r"same frame count, got \{'a': 2, 'b': 4\}"):
        backend.collate([short, long])
    with pytest.raises(AlignmentError, match="response contains 1 token"):
        backend.collate([short], [[40, backend.video_token_id]])


def test_backend_contract(tmp_path: Path) -> None:
    from videorl_models_llava_onevision.backend import LlavaOnevisionBackend

    from videorl.testing import assert_backend_contract

    backend = assert_backend_contract(LlavaOnevisionBackend, tmp_path, data_types=("video", "text"))
    assert backend.tokens_per_frame == 4


def test_models_tiny_command(run_cli: Any, tmp_path: Path) -> None:
    import importlib.metadata as md

    try:
        md.distribution("videorl-models-llava-onevision")
        flags: tuple[str, ...] = ()
    except md.PackageNotFoundError:  # from a checkout: load the plugin module by hand
        flags = ("--plugin", "videorl_models_llava_onevision.plugin")
    out = tmp_path / "tiny"
    result = run_cli(*flags, "models", "tiny", "llava_onevision", str(out), "--width", "96").assert_success()
    assert result.output == f"wrote a tiny llava_onevision checkpoint to {out}\n"
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llava_onevision" and config["text_config"]["hidden_size"] == 96
    assert config["vision_config"]["hidden_size"] == 48
    bad = run_cli(*flags, "models", "tiny", "llava_onevision", str(tmp_path / "bad"), "--width", "40")
    assert (
        bad.exit_code == 2
        and "width must be a multiple of 32 and at least 64, got 40" in bad.output + bad.stderr
    )
