"""The model backend contract check (:func:`assert_backend_contract`); :mod:`videorl.testing` exports it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from videorl.backend import engine_token_map
from videorl.errors import AlignmentError, DataError
from videorl.model_inputs import response_logprobs, token_logprobs

__all__ = ["assert_backend_contract", "contract_video"]


def contract_video(side: int, frames: int, seed: int) -> tuple[Any, Any]:
    """Random ``frames×3×side×side`` uint8 frames, every other frame of a 2 fps source, with metadata."""
    import torch

    from videorl.media import VideoMetadata

    gen = torch.Generator().manual_seed(seed)
    tensor = torch.randint(0, 256, (frames, 3, side, side), dtype=torch.uint8, generator=gen)
    indices = tuple(range(0, 2 * frames, 2))
    meta = VideoMetadata(
        source_fps=2.0,
        total_frames=2 * frames,
        duration=float(frames),
        frame_indices=indices,
        timestamps=tuple(i / 2 for i in indices),
        source_width=side,
        source_height=side,
        width=side,
        height=side,
    )
    return tensor, meta


def assert_backend_contract(
    backend_class: type,
    tmp_path: Path,
    *,
    model_type: str | None = None,
    data_types: Sequence[str] = ("video", "image", "text"),
    tol: float = 1e-4,
) -> Any:
    """Check a model backend end to end on its tiny random checkpoint, on CPU in fp32.

    - the :class:`~videorl.backend.ModelBackend` members are all there (looked up statically, so
      ``isinstance`` never evaluates a property such as ``processor``);
    - ``build_tiny(out, model_type=, seed=0, width=64)`` writes a checkpoint whose ``config.json``
      has a ``model_type`` the backend serves; ``save_pretrained`` of the loaded model and processor
      loads back with the same weights and the same prompt ids;
    - alignment, for each of ``data_types`` (``video``, ``image``, ``text``) alone and all in one
      (mixed) batch: ``prompt_length == len(prompt_ids)``, ``collate`` passes ``check_inputs``, the
      teacher-forced log-probs equal the ones HF ``generate`` sampled (within ``tol``), and a
      response holding a forbidden id is an ``AlignmentError``; a data type the backend does not
      support (left out of ``data_types``) must be a ``DataError`` naming the sample;
    - the rollout request: ``prompt_ids`` equal the training prompt, ``engine_prompt_ids`` are
      given, ``multi_modal_data`` holds one entry per video and image under ``"video"``/``"image"``,
      and ``vllm_prompt()`` is the ``TokensPrompt`` the engines send;
    - the dummy vision branch: with :meth:`install_vision_sync`, a text-only step runs one dummy
      forward and reaches exactly the parameters a step with media reaches, with zero gradients on
      the extra ones, and the same loss as without the hook.

    Returns the backend built on the tiny checkpoint.
    """
    import torch

    from videorl.backend import ModelBackend, PromptInput, missing_backend_members, read_model_type

    name = getattr(backend_class, "family", backend_class.__name__)
    missing = missing_backend_members(backend_class)
    assert not missing, f"{name}: lacks ModelBackend members {missing}"
    unknown = set(data_types) - {"video", "image", "text"}
    assert not unknown and data_types, f"data_types: {sorted(unknown)} (choose among video, image, text)"
    builder = getattr(backend_class, "build_tiny", None)
    assert builder is not None, f"{name}: no build_tiny classmethod (videorl models tiny needs one)"
    path = Path(builder(Path(tmp_path) / "tiny", model_type=model_type, seed=0, width=64))
    assert read_model_type(path) in getattr(backend_class, "model_types", ()), (
        f"{name}: the tiny model_type is not served"
    )
    backend = backend_class(path)
    assert isinstance(backend, ModelBackend) and backend.path == path
    assert backend.factor >= 1 and backend.temporal_patch_size >= 1

    side = backend.factor * -(-56 // backend.factor)  # frame sides are multiples of the factor
    frames = 2 * backend.temporal_patch_size
    prompts = {
        "video": PromptInput("video", "What colour is the square?", videos=[contract_video(side, frames, 0)]),
        "image": PromptInput(
            "image",
            "What colour is the square?",
            images=[
                torch.randint(
                    0, 256, (3, side, side), dtype=torch.uint8, generator=torch.Generator().manual_seed(1)
                )
            ],
        ),
        "text": PromptInput("text", "Which direction does it move?"),
    }
    for kind, prompt in prompts.items():
        if kind not in data_types:
            with pytest.raises(DataError, match=prompt.sample_id):
                backend.encode(prompt)
    encoded = {kind: backend.encode(prompts[kind]) for kind in data_types}
    for kind, enc in encoded.items():
        assert backend.prompt_length(prompts[kind]) == len(enc.prompt_ids), f"{name}, {kind}: prompt_length"

    model = backend.load_model()
    saved = Path(tmp_path) / "saved"
    model.save_pretrained(saved)
    backend.processor.save_pretrained(saved)
    reloaded = backend_class(saved)
    again = reloaded.load_model()
    weights, weights_again = model.state_dict(), again.state_dict()
    assert weights.keys() == weights_again.keys(), f"{name}: save/load changed the parameter names"
    assert all(torch.equal(weights[k], weights_again[k]) for k in weights), (
        f"{name}: save/load changed weights"
    )
    first = next(iter(encoded))
    assert reloaded.encode(prompts[first]).prompt_ids == encoded[first].prompt_ids, (
        f"{name}: reloaded prompt ids"
    )
    del again, weights_again

    forbidden = backend.forbidden_token_ids()
    assert isinstance(forbidden, frozenset) and all(isinstance(t, int) for t in forbidden), (
        f"{name}: forbidden ids"
    )
    padded = set(range(len(backend.tokenizer), model.get_output_embeddings().weight.shape[0]))
    allowed = sorted(padded - forbidden)
    assert not allowed, f"{name}: forbidden_token_ids() misses padded-vocabulary ids {allowed[:8]}"
    # a map may only rename placeholders: read through it, a text token could hide a real mismatch
    renamed = sorted({*engine_token_map(backend).values()} - forbidden)
    assert not renamed, f"{name}: engine_token_map maps engine ids to non-placeholder ids {renamed[:8]}"
    batches = [[kind] for kind in data_types] + ([list(data_types)] if len(data_types) > 1 else [])
    for kinds in batches:
        where = f"{name}, batch {'+'.join(kinds)}"
        batch = [encoded[k] for k in kinds]
        inputs = backend.collate(batch)
        backend.check_inputs(inputs)
        for row, (kind, enc) in enumerate(zip(kinds, batch)):
            request = backend.rollout_request(enc)
            assert request.sample_id == enc.sample_id and request.engine_prompt_ids, f"{where}: request"
            assert request.prompt_ids == inputs.prompt_ids(row) == enc.prompt_ids, (
                f"{where}: prompt ids differ"
            )
            prompt = prompts[kind]
            counts = {"video": len(prompt.videos), "image": len(prompt.images)}
            got = {key: len(request.multi_modal_data.get(key, [])) for key in counts}
            assert got == counts and set(request.multi_modal_data) <= set(counts), f"{where}: media {got}"
            vllm = request.vllm_prompt()
            assert vllm["prompt_token_ids"] == request.engine_prompt_ids, f"{where}: vllm_prompt"
            assert ("multi_modal_data" in vllm) == bool(prompt.videos or prompt.images), (
                f"{where}: vllm_prompt"
            )
        torch.manual_seed(0)
        with torch.no_grad():
            out = model.generate(
                **inputs.model_kwargs(),
                max_new_tokens=4,
                min_new_tokens=4,
                do_sample=True,
                top_k=0,
                output_logits=True,
                return_dict_in_generate=True,
                suppress_tokens=sorted(forbidden),
            )
        generated = out.sequences[:, inputs.input_ids.shape[1] :]
        sampled = token_logprobs(torch.stack(out.logits, 1), generated)
        training = backend.collate(batch, generated.tolist())
        with torch.no_grad():
            forced = response_logprobs(model(**training.model_kwargs()).logits, training)
        gap = (forced - sampled).abs().max().item()
        assert gap < tol, f"{where}: teacher-forced log-probs differ from generate's by {gap}"
        with pytest.raises(AlignmentError):
            backend.collate(batch[:1], [[sorted(forbidden)[0]]])

    def reached(prompt_kinds: Sequence[str], sync: Any = None) -> tuple[set[str], float]:
        model.zero_grad(set_to_none=True)
        inputs = backend.collate(
            [encoded[k] for k in prompt_kinds], [[int(backend.tokenizer.eos_token_id)]] * len(prompt_kinds)
        )
        loss = -response_logprobs(model(**inputs.model_kwargs()).logits, inputs).mean()
        loss.backward()
        return {n for n, p in model.named_parameters() if p.grad is not None}, loss.item()

    media = next((k for k in data_types if k != "text"), None)
    if media is not None:
        model.train()
        plain, plain_loss = reached(["text"]) if "text" in data_types else (set(), 0.0)
        sync = backend.install_vision_sync(model)
        try:
            with_media, _ = reached([media])
            assert sync.dummy_calls == 0, f"{name}: a dummy vision forward ran with real {media}"
            if "text" in data_types:
                with_dummy, dummy_loss = reached(["text"])
                assert sync.dummy_calls == 1, f"{name}: a text-only forward ran {sync.dummy_calls} dummies"
                assert with_dummy == with_media, (
                    f"{name}: the dummy reaches {sorted(with_dummy ^ with_media)[:5]}..."
                )
                assert dummy_loss == pytest.approx(plain_loss, abs=1e-6), (
                    f"{name}: the dummy changed the loss"
                )
                extra = [p.grad for n, p in model.named_parameters() if n in with_media - plain]
                assert extra and all(not g.any() for g in extra), (
                    f"{name}: the dummy's gradients are not zero"
                )
        finally:
            sync.remove()
        model.eval()
    return backend
