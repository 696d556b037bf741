"""Bad inputs give the errors described: named sample, both counts, the likely cause."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from videorl.api import (
    AlignmentError,
    ConfigError,
    DataError,
    PromptInput,
    UnknownComponentError,
    backend_for_model,
    filter_overlong,
)
from videorl.plugins import load_plugins
from videorl_models.qwen2_vl import Qwen2VLBackend


def test_frames_not_multiples_of_the_factor(backend_for: Callable[[str], Any], media: Any) -> None:
    backend = backend_for("qwen2_5_vl")
    frames, meta = media.video(32)  # decoded for Qwen3 (factor 32), given to Qwen2.5-VL (28)
    with pytest.raises(
        DataError, match=r"sample 'clip-7', video 0: the frames are 64×96 pixels.*multiples of 28"
    ):
        backend.encode(PromptInput("clip-7", "What colour?", videos=[(frames, meta)]))
    with pytest.raises(DataError, match="must be uint8"):
        backend.encode(PromptInput("clip-8", "What colour?", videos=[(frames[:, :, :56, :56].float(), meta)]))
    with pytest.raises(DataError, match=r"image 0: an image must be a 3×H×W tensor"):
        backend.encode(PromptInput("img-1", "What colour?", images=[frames[0, :2, :56, :56]]))


def test_metadata_of_other_frames(backend_for: Callable[[str], Any], media: Any) -> None:
    backend = backend_for("qwen3_vl")
    frames, meta = media.video(32)
    with pytest.raises(DataError, match="metadata lists 3 sampled frames but the tensor holds 2"):
        backend.encode(PromptInput("clip-9", "What colour?", videos=[(frames[:2], meta)]))


def test_mismatched_grid_is_reported_before_the_forward(
    backend_for: Callable[[str], Any], model_for: Callable[[str], Any], media: Any
) -> None:
    backend, model = backend_for("qwen2_5_vl"), model_for("qwen2_5_vl")
    enc = backend.encode(PromptInput("clip-3", "What colour?", videos=[media.video(28)]))
    enc.visual["video_grid_thw"] = torch.tensor([[2, 4, 4]])  # 8 features for 12 placeholders
    with pytest.raises(
        AlignmentError, match=r"sample 'clip-3': 12 video placeholder tokens .* imply 8 features"
    ):
        backend.collate([enc])
    good = backend.encode(PromptInput("clip-3", "What colour?", videos=[media.video(28)]))
    kwargs = backend.collate([good]).model_kwargs()
    kwargs["video_grid_thw"] = torch.tensor([[2, 4, 8]])  # 16 features for 12 placeholders
    sync = backend.install_vision_sync(model)
    try:
        with pytest.raises(
            AlignmentError, match=r"'batch row 0': 12 video placeholder tokens .* imply 16 features"
        ):
            model(**kwargs)
    finally:
        sync.remove()


def test_a_processor_that_resizes_is_caught(
    backend_for: Callable[[str], Any], media: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = backend_for("qwen2_vl")
    real = backend._pixels

    def resized(prompt: PromptInput) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        visual, norms = real(prompt)
        visual["video_grid_thw"] = torch.tensor([[2, 2, 4]])
        return visual, norms

    monkeypatch.setattr(backend, "_pixels", resized)
    with pytest.raises(
        AlignmentError,
        match=(
            r"processor produced video grid\(s\) \[\(2, 2, 4\)\] but the prompt was expanded for \[\(2, 4, "
            r"6\)\]"
        ),
    ):
        backend.encode(PromptInput("clip-5", "What colour?", videos=[media.video(28)]))


def test_missing_mm_token_type_ids(
    backend_for: Callable[[str], Any], model_for: Callable[[str], Any], media: Any
) -> None:
    backend, model = backend_for("qwen2_5_vl"), model_for("qwen2_5_vl")
    inputs = backend.collate(
        [backend.encode(PromptInput("clip-4", "What colour?", videos=[media.video(28)]))]
    )
    inputs.mm_token_type_ids = None
    with pytest.raises(
        AlignmentError,
        match=r"samples \['clip-4'\]: visual inputs without mm_token_type_ids.*Qwen2.5-VL silently",
    ):
        backend.check_inputs(inputs)
    sync = backend.install_vision_sync(model)
    try:
        with pytest.raises(AlignmentError, match="without mm_token_type_ids"):
            model(**inputs.model_kwargs())
    finally:
        sync.remove()


def test_unknown_model_type(tmp_path: Path) -> None:
    registry = load_plugins().model_backends
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_5_v"}))
    with pytest.raises(
        UnknownComponentError,
        match=r"model_type 'qwen2_5_v' is served by no installed.*Did you mean 'qwen2_5_vl'",
    ):
        backend_for_model(tmp_path, registry)
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["X"]}))
    with pytest.raises(ConfigError, match="has no 'model_type'"):
        backend_for_model(tmp_path, registry)
    with pytest.raises(ConfigError, match="does not exist"):
        backend_for_model(tmp_path / "missing", registry)


def test_moe_model_types_resolve_to_their_family(tiny_dir: Callable[[str], Path]) -> None:
    registry = load_plugins().model_backends
    assert backend_for_model(tiny_dir("qwen3_vl_moe"), registry).family == "qwen3_vl"
    assert backend_for_model(tiny_dir("qwen3_5_moe"), registry).family == "qwen3_5"


def test_a_checkpoint_of_another_family(tiny_dir: Callable[[str], Path]) -> None:
    with pytest.raises(ConfigError, match="model_type 'qwen3_vl' is not served by the qwen2_vl backend"):
        _ = Qwen2VLBackend(tiny_dir("qwen3_vl")).config


def test_literal_placeholder_in_the_text(backend_for: Callable[[str], Any], media: Any) -> None:
    backend = backend_for("qwen2_vl")
    prompt = PromptInput("q-1", "Is <|video_pad|> a token?", videos=[media.video(28)])
    with pytest.raises(AlignmentError, match="sample 'q-1': the rendered prompt has 2 video placeholder"):
        backend.encode(prompt)


def test_a_response_with_a_placeholder_is_rejected(backend_for: Callable[[str], Any], media: Any) -> None:
    backend = backend_for("qwen3_5")
    enc = backend.encode(PromptInput("r-1", "What colour?", videos=[media.video(32)]))
    pad = backend.token_ids["video"]
    with pytest.raises(
        AlignmentError, match=rf"sample 'r-1': the response contains 1 token.*id {pad} at position 2"
    ):
        backend.collate([enc], [[50, 51, pad, 52]])


def test_overlong_prompts_are_skipped_or_fail_never_cut(
    backend_for: Callable[[str], Any], media: Any
) -> None:
    backend = backend_for("qwen2_5_vl")
    short = PromptInput("short", "Hi")
    long = PromptInput("long", "What colour?", videos=[media.video(28, frames=8, rows=4, cols=4)])
    n_short, n_long = backend.prompt_length(short), backend.prompt_length(long)
    assert n_long - n_short > 4 * 4 * 4 * 4 // 4  # 4 temporal patches of 8×8 patches: 256 visual tokens
    limit = n_long - 1
    kept, dropped = filter_overlong(
        [short, long], length=backend.prompt_length, sample_id=lambda p: p.sample_id, limit=limit
    )
    assert kept == [short]
    assert [(d.sample_id, d.tokens, d.limit) for d in dropped] == [("long", n_long, limit)]
    with pytest.raises(DataError, match=rf"sample 'long': {n_long} prompt tokens > limit {limit}"):
        filter_overlong(
            [short, long],
            length=backend.prompt_length,
            sample_id=lambda p: p.sample_id,
            limit=limit,
            on_overflow="fail",
        )


def test_a_tokenizer_of_another_model(tiny_dir: Callable[[str], Path], tmp_path: Path, media: Any) -> None:
    import shutil

    copy = Path(shutil.copytree(tiny_dir("qwen2_vl"), tmp_path / "copy"))
    config = json.loads((copy / "config.json").read_text())
    config["video_token_id"] += 1
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        ConfigError, match=r"config.json says video_token_id=\d+ but the tokenizer maps <\|video_pad\|> to"
    ):
        Qwen2VLBackend(copy).encode(PromptInput("s", "x", videos=[media.video(28)]))
