"""The HF ``generate`` rollout engine: groups, log-probs equal to the training forward, suppression."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from videorl.backend import PromptInput, backend_for_model
from videorl.media.metadata import VideoMetadata
from videorl.model_inputs import response_logprobs
from videorl.plugins import load_plugins
from videorl.rollout import SamplingParams
from videorl.rollout.hf import HFEngine


def _video(t: int = 4, side: int = 56, seed: int = 0) -> tuple[torch.Tensor, VideoMetadata]:
    g = torch.Generator().manual_seed(seed)
    frames = torch.randint(0, 256, (t, 3, side, side), dtype=torch.uint8, generator=g)
    return frames, VideoMetadata.every_frame(t, side, side, fps=2.0)


@pytest.fixture(scope="module")
def setup(tiny_model_dir: Callable[[str], Path]) -> tuple[Any, Any, list[Any]]:
    backend = backend_for_model(tiny_model_dir("qwen2_5_vl"), load_plugins().model_backends)
    model = backend.load_model(dtype=torch.float32)
    prompts = [
        backend.encode(PromptInput("video-1", "What colour is the square?", videos=[_video()])),
        backend.encode(PromptInput("text-1", "Say hello.")),
    ]
    return backend, model, prompts


def _teacher_forced(
    backend: Any, model: Any, prompts: list[Any], groups: list[list[Any]]
) -> list[list[float]]:
    flat = [(p, c) for p, g in zip(prompts, groups) for c in g]
    inputs = backend.collate([p for p, _ in flat], [c.token_ids for _, c in flat])
    with torch.no_grad():
        logits = model(**inputs.model_kwargs()).logits
    lp = response_logprobs(logits, inputs, forbidden=backend.forbidden_token_ids())
    return [lp[i, : len(c.token_ids)].tolist() for i, (_, c) in enumerate(flat)]


def test_groups_and_logprobs_match_the_teacher_forced_forward(setup: Any) -> None:
    backend, model, prompts = setup
    groups = HFEngine(backend, model).generate(prompts, SamplingParams(n=3, max_tokens=6, seed=1))
    assert [len(g) for g in groups] == [3, 3]
    expected = _teacher_forced(backend, model, prompts, groups)
    got = [c.logprobs for g in groups for c in g]
    for e, o in zip(expected, got):
        assert len(e) == len(o) and max(abs(a - b) for a, b in zip(e, o)) < 1e-5
    for c in (c for g in groups for c in g):
        assert c.finish_reason in {"stop", "length"}
        assert c.finish_reason == "stop" or len(c.token_ids) == 6


def test_greedy_is_deterministic_and_seeded_sampling_reproducible(setup: Any) -> None:
    backend, model, prompts = setup
    engine = HFEngine(backend, model)
    greedy = SamplingParams(n=2, temperature=0, max_tokens=5)
    a, b = engine.generate(prompts, greedy), engine.generate(prompts, greedy)
    assert [[c.token_ids for c in g] for g in a] == [[c.token_ids for c in g] for g in b]
    assert a[0][0].token_ids == a[0][1].token_ids  # greedy: every sample of a group is the same
    sampled = SamplingParams(n=2, max_tokens=5, seed=7)
    assert [c.token_ids for c in engine.generate(prompts, sampled)[0]] == [
        c.token_ids for c in engine.generate(prompts, sampled)[0]
    ]


def test_forbidden_ids_are_never_sampled_and_masked_in_logprobs(setup: Any) -> None:
    backend, model, prompts = setup
    forbidden = sorted(backend.forbidden_token_ids())
    video_pad = backend.processor.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    assert video_pad in forbidden

    def favour_forbidden(_module: Any, _inputs: Any, output: torch.Tensor) -> torch.Tensor:
        bias = torch.zeros(output.shape[-1])
        bias[forbidden] = 30.0
        return output + bias

    handle = model.lm_head.register_forward_hook(favour_forbidden)
    try:
        inputs = backend.collate(prompts)
        raw = model.generate(**inputs.model_kwargs(), max_new_tokens=4, do_sample=False)
        assert set(raw[:, inputs.prompt_width :].flatten().tolist()) <= set(forbidden)  # without suppression
        groups = HFEngine(backend, model).generate(prompts, SamplingParams(n=2, max_tokens=4, seed=0))
        tokens = {t for g in groups for c in g for t in c.token_ids}
        assert not tokens & set(forbidden)
        expected = _teacher_forced(backend, model, prompts, groups)
        got = [c.logprobs for g in groups for c in g]
        assert max(abs(a - b) for e, o in zip(expected, got) for a, b in zip(e, o)) < 1e-5
    finally:
        handle.remove()


def test_an_owned_copy_follows_update_weights(setup: Any) -> None:
    backend, model, prompts = setup
    engine = HFEngine(backend, backend.load_model(dtype=torch.float32), owns_model=True)
    updated = {
        k: v + 0.01 * torch.randn_like(v) if v.is_floating_point() else v
        for k, v in model.state_dict().items()
    }
    engine.update_weights(updated)
    groups = engine.generate(prompts[:1], SamplingParams(n=1, max_tokens=4, seed=3))
    shadow = backend.load_model(dtype=torch.float32)
    shadow.load_state_dict(updated)
    expected = _teacher_forced(backend, shadow, prompts[:1], groups)
    assert max(abs(a - b) for a, b in zip(expected[0], groups[0][0].logprobs)) < 1e-5


def test_only_the_chosen_tokens_log_probs_are_kept(setup: Any, monkeypatch: Any) -> None:
    """No ``output_logits``: the engine never holds every step's full-vocabulary logits."""
    backend, model, prompts = setup
    calls: list[dict[str, Any]] = []
    generate = model.generate

    def recording(**kwargs: Any) -> Any:
        calls.append(kwargs)
        result = generate(**kwargs)
        assert getattr(result, "logits", None) is None
        return result

    monkeypatch.setattr(model, "generate", recording)
    groups = HFEngine(backend, model).generate(prompts, SamplingParams(n=2, max_tokens=5, seed=4))
    assert calls and not any(c.get("output_logits") or c.get("output_scores") for c in calls)
    expected = _teacher_forced(backend, model, prompts, groups)
    got = [c.logprobs for g in groups for c in g]
    assert all(len(e) == len(o) for e, o in zip(expected, got))
    assert max(abs(a - b) for e, o in zip(expected, got) for a, b in zip(e, o)) < 1e-5


def test_one_prefill_per_prompt_gives_what_n_repeated_prompts_give(setup: Any) -> None:
    """The vision tower sees each prompt's patches once, not ``n`` times, and the samples are those of
    ``generate`` on the ``n``-fold repeated batch (same seed, same tokens, same log-probs)."""
    backend, model, prompts = setup
    patches: list[int] = []
    handle = model.model.visual.register_forward_hook(lambda _m, args, _out: patches.append(args[0].shape[0]))
    engine = HFEngine(backend, model)
    params = SamplingParams(n=4, max_tokens=8, seed=11)
    try:
        groups = engine.generate(prompts, params)
        video_patches = prompts[0].visual["pixel_values_videos"].shape[0]
        assert patches == [video_patches]  # one tower call for the batch; the text prompt has none
        patches.clear()
        repeated = backend.collate([p for p in prompts for _ in range(params.n)])
        torch.manual_seed(11)
        with torch.no_grad():
            reference = model.generate(
                **repeated.model_kwargs(),
                max_new_tokens=params.max_tokens,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=None,
                suppress_tokens=engine.forbidden,
                pad_token_id=engine.pad_id,
                eos_token_id=sorted(engine.eos_ids),
            )
        assert patches == [params.n * video_patches]  # what the engine did before
    finally:
        handle.remove()
    for row, completion in enumerate(c for g in groups for c in g):
        expected = reference[row, repeated.prompt_width :].tolist()[: len(completion.token_ids)]
        assert completion.token_ids == expected
    samples = [c.token_ids for g in groups for c in g]
    assert len({tuple(s) for s in samples}) > 1  # the n rows are sampled independently, not copies
    expected_lp = _teacher_forced(backend, model, prompts, groups)
    got = [c.logprobs for g in groups for c in g]
    assert max(abs(a - b) for e, o in zip(expected_lp, got) for a, b in zip(e, o)) < 1e-5


def test_the_hf_engine_keeps_the_engine_contract(setup: Any) -> None:
    """``videorl.testing.assert_engine_contract``: groups, log-probs of the training forward before and
    after a refresh of perturbed weights, its declared capabilities, the shared actor module."""
    from videorl.testing import assert_engine_contract

    backend = setup[0]
    groups = assert_engine_contract(HFEngine, backend, options={"max_batch_prompts": 1})
    assert [len(g) for g in groups] == [2, 2]

    class Stale(HFEngine):  # keeps its weights: the refresh check must catch it
        def update_weights(self, state_dict: Any) -> None:
            pass

    with pytest.raises(AssertionError, match="after update_weights: log-probs differ"):
        assert_engine_contract(Stale, backend, data_types=("text",))
