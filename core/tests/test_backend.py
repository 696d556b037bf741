"""The model-backend interface in core: budgets, model_type lookup, batching and log-probs."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from videorl.api import (
    ConfigError,
    EncodedPrompt,
    PromptInput,
    RolloutRequest,
    UnknownComponentError,
    VisualBudget,
    backend_for_model,
    collate_encoded,
    read_model_type,
    response_logprobs,
    token_logprobs,
)
from videorl.media import DecodeParams, ImageParams
from videorl.registry import Registry


def test_importing_the_api_does_not_import_torch() -> None:
    code = "import sys, videorl.api; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_budget_defaults_validation_and_data_path_parameters() -> None:
    budget = VisualBudget.for_factor(32, video_max_frames=16)
    assert (budget.image_min_pixels, budget.video_min_pixels, budget.video_max_frames) == (4096, 4096, 16)
    video = DecodeParams.from_budget(budget, factor=32, temporal_patch_size=2)
    assert (video.factor, video.temporal_patch_size, video.fps, video.max_frames) == (32, 2, 2.0, 16)
    assert (video.min_pixels, video.max_pixels, video.total_pixels) == (4096, 262_144, None)
    image = ImageParams.from_budget(budget, factor=32)
    assert (image.factor, image.min_pixels, image.max_pixels) == (32, 4096, 1_048_576)
    with pytest.raises(
        ConfigError, match=r"video_min_pixels \(9\) must be positive and at most video_max_pixels \(4\)"
    ):
        VisualBudget.for_factor(28, video_min_pixels=9, video_max_pixels=4)
    with pytest.raises(ConfigError, match="not even one frame fits"):
        VisualBudget.for_factor(28, video_total_pixels=10)
    with pytest.raises(ConfigError, match="video_fps"):
        VisualBudget.for_factor(28, video_fps=0)


def test_prompt_input_data_type() -> None:
    frames = torch.zeros(2, 3, 28, 28, dtype=torch.uint8)
    assert PromptInput("a", "x").data_type == "text"
    assert PromptInput("a", "x", images=[frames[0]]).data_type == "image"
    assert PromptInput("a", "x", videos=[(frames, None)], images=[frames[0]]).data_type == "video"  # type: ignore[list-item]


class _Fake:
    family = "fake_vl"
    model_types = ("fake_vl", "fake_vl_moe")
    factor = 28
    temporal_patch_size = 2
    merge_size = 2

    def __init__(self, path: Path | None = None, **options: Any) -> None:
        self.path, self.options = path, options


def test_backend_lookup_by_model_type(tmp_path: Path) -> None:
    registry: Registry[Any] = Registry("model backend")
    registry.register("fake_vl", _Fake, origin="videorl-fake", aliases=("fake_vl_moe",))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "fake_vl_moe"}))
    assert read_model_type(tmp_path) == "fake_vl_moe"
    backend = backend_for_model(tmp_path, registry, budget="b")
    assert isinstance(backend, _Fake) and backend.path == tmp_path and backend.options == {"budget": "b"}
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(
        UnknownComponentError,
        match=(
            r"config.json: model_type 'llama' is served by no installed model backend .*Registered: fake_vl"
        ),
    ):
        backend_for_model(tmp_path, registry)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="could not be read as JSON"):
        read_model_type(tmp_path)


def _encoded(
    sample_id: str, ids: list[int], types: list[int] | None, visual: dict[str, torch.Tensor]
) -> EncodedPrompt:
    return EncodedPrompt(sample_id, ids, types, visual, ids, PromptInput(sample_id, ""))


def test_collate_left_pads_prompts_and_right_pads_responses() -> None:
    a = _encoded(
        "a",
        [1, 2, 9, 9, 3],
        [0, 0, 2, 2, 0],
        {"video_grid_thw": torch.tensor([[1, 2, 4]]), "tiles": torch.ones(1, 2)},
    )
    b = _encoded("b", [4, 5], [0, 0], {})
    batch = collate_encoded([a, b], pad_token_id=0, responses=[[7], [8, 6, 5]])
    assert batch.sample_ids == ["a", "b"] and batch.prompt_width == 5
    assert batch.input_ids.tolist() == [[1, 2, 9, 9, 3, 7, 0, 0], [0, 0, 0, 4, 5, 8, 6, 5]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 1, 1]]
    assert batch.mm_token_type_ids.tolist() == [[0, 0, 2, 2, 0, 0, 0, 0], [0] * 8]
    assert batch.response_mask.tolist() == [[1, 0, 0], [1, 1, 1]]
    assert batch.video_grid_thw.tolist() == [[1, 2, 4]] and set(batch.extra) == {"tiles"}
    assert batch.prompt_ids(0) == [1, 2, 9, 9, 3] and batch.prompt_ids(1) == [4, 5]
    assert set(batch.model_kwargs()) == {
        "input_ids",
        "attention_mask",
        "mm_token_type_ids",
        "video_grid_thw",
        "tiles",
    }
    prompts_only = collate_encoded([a, b], pad_token_id=0)
    assert prompts_only.response_mask is None and prompts_only.input_ids.shape == (2, 5)
    moved = batch.to(dtype=torch.float16)
    assert moved.extra["tiles"].dtype == torch.float16 and moved.input_ids.dtype == torch.long
    with pytest.raises(ValueError, match="2 prompts but 1 responses"):
        collate_encoded([a, b], pad_token_id=0, responses=[[1]])


def test_token_logprobs_mask_forbidden_ids_without_touching_the_logits() -> None:
    logits = torch.tensor([[0.0, math.log(2.0), math.log(3.0), math.log(4.0)]])
    original = logits.clone()
    assert token_logprobs(logits, torch.tensor([2]))[0].item() == pytest.approx(math.log(3 / 10))
    masked = token_logprobs(logits, torch.tensor([2]), forbidden=[3, 99])  # 99: beyond the vocabulary
    assert masked[0].item() == pytest.approx(math.log(3 / 6))
    assert token_logprobs(logits, torch.tensor([1]), temperature=0.5)[0].item() == pytest.approx(
        math.log(4 / 30)
    )
    assert torch.equal(logits, original)


def test_response_logprobs_read_the_logits_one_step_before_each_token() -> None:
    a = _encoded("a", [1, 2], None, {})
    batch = collate_encoded([a], pad_token_id=0, responses=[[3, 1]])
    logits = torch.full((1, 4, 4), -1e9)
    logits[0, 1, 3] = 0.0  # after the prompt: token 3 for sure
    logits[0, 2, 1] = logits[0, 2, 2] = 0.0  # then 1 or 2, even odds
    assert response_logprobs(logits, batch)[0].tolist() == pytest.approx([0.0, math.log(0.5)])
    with pytest.raises(ValueError, match="no responses"):
        response_logprobs(logits, collate_encoded([a], pad_token_id=0))


def test_rollout_request_as_a_vllm_prompt() -> None:
    request = RolloutRequest(
        "s", [1, 9, 9, 2], [1, 9, 2], {"video": [("frames", {"fps": 2.0})]}, {"do_resize": False}
    )
    assert request.vllm_prompt() == {
        "prompt_token_ids": [1, 9, 2],
        "multi_modal_data": {"video": [("frames", {"fps": 2.0})]},
        "mm_processor_kwargs": {"do_resize": False},
    }
    assert RolloutRequest("t", [1], [1], {}, {}).vllm_prompt() == {"prompt_token_ids": [1]}


class _Complete:
    """Every ModelBackend member; ``processor`` records whether anything evaluated it."""

    family = "toy"
    model_types = ("toy",)
    factor = 28
    temporal_patch_size = 2
    evaluated = False

    def __init__(self, path: Any = None) -> None:
        self.path = path

    @property
    def budget(self) -> VisualBudget:
        return VisualBudget.for_factor(28)

    @property
    def processor(self) -> Any:
        type(self).evaluated = True
        raise OSError("Can't load the processor from the Hub for '/no/such/dir'")

    @property
    def tokenizer(self) -> Any:
        return self.processor.tokenizer

    def load_model(self, *, dtype: Any = None, device: Any = None) -> Any: ...
    def prepare_model(self, model: Any) -> Any: ...
    def prompt_length(self, prompt: Any) -> int: ...
    def encode(self, prompt: Any) -> Any: ...
    def collate(self, encoded: Any, responses: Any = None) -> Any: ...
    def check_inputs(self, inputs: Any) -> None: ...
    def rollout_request(self, encoded: Any) -> Any: ...
    def forbidden_token_ids(self) -> frozenset[int]: ...
    def end_of_turn_id(self) -> int: ...
    def install_vision_sync(self, model: Any) -> Any: ...


def test_isinstance_and_the_member_check_never_evaluate_a_property() -> None:
    from videorl.api import ModelBackend
    from videorl.backend import missing_backend_members

    backend = _Complete("/no/such/dir")
    assert isinstance(backend, ModelBackend) and missing_backend_members(_Complete) == []
    assert not _Complete.evaluated  # Python 3.11's own isinstance would have called .processor

    class Skeleton:
        family = "internvl"

        def encode(self, prompt: Any) -> Any: ...

    assert not isinstance(Skeleton(), ModelBackend)
    assert missing_backend_members(Skeleton) == [
        "budget", "check_inputs", "collate", "end_of_turn_id", "factor", "forbidden_token_ids",
        "install_vision_sync", "load_model", "model_types", "prepare_model", "processor", "prompt_length",
        "rollout_request", "temporal_patch_size", "tokenizer",
    ]  # fmt: skip
    assert "path" in missing_backend_members(Skeleton())  # an instance needs its checkpoint directory
