"""The rollout engine contract check (:func:`assert_engine_contract`); :mod:`videorl.testing` exports it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from videorl.backend import hub_checkpoint_layout
from videorl.errors import ConfigError
from videorl.generation import (
    Completion,
    EngineCapabilities,
    EngineSpec,
    RolloutEngine,
    SamplingParams,
    capabilities_of,
)
from videorl.model_inputs import PromptInput, response_logprobs
from videorl.testing.backend import contract_video

if TYPE_CHECKING:
    import torch

    from videorl.backend import ModelBackend
    from videorl.model_inputs import EncodedPrompt

__all__ = ["assert_engine_contract"]


def _prompts(backend: ModelBackend, data_types: Sequence[str]) -> list[EncodedPrompt]:
    side = backend.factor * -(-56 // backend.factor)  # frame sides are multiples of the factor
    made = {
        "text": PromptInput("engine-text", "Which direction does it move?"),
        "video": PromptInput(
            "engine-video",
            "What colour is the square?",
            videos=[contract_video(side, 2 * backend.temporal_patch_size, 0)],
        ),
    }
    unknown = set(data_types) - set(made)
    assert data_types and not unknown, f"data_types: {sorted(unknown)} (choose among text, video)"
    return [backend.encode(made[kind]) for kind in data_types]


def _forced(
    model: torch.nn.Module, backend: ModelBackend, prompt: EncodedPrompt, completion: Completion
) -> list[float]:
    """The training forward's log-probs of ``completion`` after ``prompt`` (forbidden ids masked)."""
    import torch

    inputs = backend.collate([prompt], [completion.token_ids])
    with torch.no_grad():
        logits = model(**inputs.model_kwargs()).logits
    forced = response_logprobs(logits, inputs, forbidden=sorted(backend.forbidden_token_ids()))
    return [float(x) for x in forced[0, : len(completion.token_ids)]]


def _check_completions(
    name: str,
    out: Any,
    prompts: Sequence[EncodedPrompt],
    params: SamplingParams,
    forbidden: frozenset[int],
) -> list[list[Completion]]:
    assert isinstance(out, list) and len(out) == len(prompts), (
        f"{name}: generate returned {len(out) if isinstance(out, list) else type(out).__name__} groups "
        f"for {len(prompts)} prompts"
    )
    for prompt, group in zip(prompts, out):
        where = f"{name}, {prompt.sample_id}"
        assert isinstance(group, list) and len(group) == params.n, f"{where}: not {params.n} completions"
        for c in group:
            assert isinstance(c, Completion), f"{where}: {type(c).__name__} is not a Completion"
            assert 1 <= len(c.token_ids) <= params.max_tokens, f"{where}: {len(c.token_ids)} tokens"
            assert len(c.logprobs) == len(c.token_ids), f"{where}: log-probs and tokens differ in length"
            assert c.finish_reason in ("stop", "length"), f"{where}: finish reason {c.finish_reason!r}"
            if c.finish_reason == "length":
                assert len(c.token_ids) == params.max_tokens, f"{where}: 'length' before max_tokens"
            assert all(math.isfinite(x) and x <= 1e-6 for x in c.logprobs), f"{where}: log-probs {c.logprobs}"
            assert not forbidden & set(c.token_ids), f"{where}: sampled forbidden ids"
    return out


def _check_logprobs(
    name: str,
    model: torch.nn.Module,
    backend: ModelBackend,
    prompts: Sequence[EncodedPrompt],
    out: list[list[Completion]],
    tol: float,
    what: str,
) -> list[list[float]]:
    """The engine's log-probs equal the training forward's of ``model`` within ``tol``; the forward's."""
    forced = []
    for prompt, group in zip(prompts, out):
        for c in group:
            reference = _forced(model, backend, prompt, c)
            gap = max(abs(a - b) for a, b in zip(c.logprobs, reference))
            assert gap <= tol, (
                f"{name}, {prompt.sample_id}: {what}: log-probs differ from the forward's by {gap}"
            )
            forced.append(reference)
    return forced


def _state(
    model: torch.nn.Module, backend: ModelBackend, caps: EngineCapabilities, dtype: str
) -> dict[str, Any]:
    """``model``'s weights as the trainer sends them to an engine declaring ``caps``."""
    import torch

    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if caps.weights_in_engine_dtype and dtype != "auto":
        state = {k: v.to(getattr(torch, dtype)) if v.is_floating_point() else v for k, v in state.items()}
    return state if caps.weights_layout == "transformers" else hub_checkpoint_layout(backend, state)


def assert_engine_contract(
    factory: Any,
    backend: ModelBackend,
    *,
    options: Mapping[str, Any] | None = None,
    dtype: str = "float32",
    data_types: Sequence[str] = ("text", "video"),
    max_tokens: int = 4,
    tol: float = 2e-3,
) -> list[list[Completion]]:
    """Check a rollout engine factory (what ``register_rollout_engines`` registers) on ``backend``'s
    tiny checkpoint (``backend.path``), in ``dtype``, with ``options`` (``rollout.engine_options``).

    - the factory declares :class:`~videorl.generation.EngineCapabilities` (``capabilities``) and has
      ``from_spec(backend, spec, options)``; an unknown option is a :class:`ConfigError` naming it;
    - the engine is a :class:`~videorl.generation.RolloutEngine` declaring the factory's capabilities,
      with ``sleep()`` exactly when it declares ``can_sleep``;
    - ``generate`` returns ``n`` completions per prompt (a text and a video prompt: ``data_types``), at
      most ``max_tokens`` tokens each, one log-prob per token, ``stop`` or ``length`` (then exactly
      ``max_tokens``), no forbidden id, and the log-probs of the training forward within ``tol``;
    - ``update_weights`` takes the actor's weights in the declared layout and dtype (after ``sleep()``
      where it can): perturbed weights are the ones it then samples with (log-probs of the perturbed
      forward);
    - with ``shares_actor_module``, an engine given ``spec.actor_module`` generates with that module;
    - ``close()``.

    Returns the completions of the first ``generate``.
    """
    import torch

    name = getattr(factory, "__name__", type(factory).__name__)
    caps = getattr(factory, "capabilities", None)
    assert isinstance(caps, EngineCapabilities), f"{name}: no capabilities (an EngineCapabilities attribute)"
    assert callable(getattr(factory, "from_spec", None)), f"{name}: no from_spec(backend, spec, options)"
    prompts = _prompts(backend, data_types)
    longest = max(len(p.prompt_ids) for p in prompts)
    spec = EngineSpec(
        name=name, model_path=str(backend.path), dtype=dtype, max_model_len=max(1024, longest + max_tokens)
    )
    with pytest.raises(ConfigError, match="no_such_option"):
        factory.from_spec(backend, spec, {**(options or {}), "no_such_option": 1})
    model = backend.load_model(dtype=torch.float32).eval()
    forbidden = backend.forbidden_token_ids()
    sampled = SamplingParams(n=2, temperature=1.0, max_tokens=max_tokens, seed=0)
    engine = factory.from_spec(backend, spec, dict(options or {}))
    try:
        assert isinstance(engine, RolloutEngine), f"{name}: lacks generate, update_weights or close"
        assert capabilities_of(engine) == caps, (
            f"{name}: the engine declares other capabilities than its factory"
        )
        assert callable(getattr(engine, "sleep", None)) == caps.can_sleep, f"{name}: sleep() iff can_sleep"
        first = _check_completions(name, engine.generate(prompts, sampled), prompts, sampled, forbidden)
        before = _check_logprobs(name, model, backend, prompts, first, tol, "as loaded")
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=generator))
        changed = _check_logprobs(name, model, backend, prompts, first, math.inf, "perturbed")
        assert max(abs(a - b) for x, y in zip(before, changed) for a, b in zip(x, y)) > 10 * tol, (
            "the perturbation changes no log-prob: use a larger model or a smaller tol"
        )
        if caps.can_sleep:
            engine.sleep()  # type: ignore[attr-defined]
        engine.update_weights(_state(model, backend, caps, dtype))
        after = _check_completions(name, engine.generate(prompts, sampled), prompts, sampled, forbidden)
        _check_logprobs(name, model, backend, prompts, after, tol, "after update_weights")
    finally:
        engine.close()
    if caps.shares_actor_module:  # the module on disk is the unperturbed one: a copy would not match
        shared = factory.from_spec(
            backend,
            EngineSpec(name=name, model_path=str(backend.path), dtype=dtype, actor_module=model),
            dict(options or {}),
        )
        try:
            out = _check_completions(name, shared.generate(prompts, sampled), prompts, sampled, forbidden)
            _check_logprobs(name, model, backend, prompts, out, tol, "with the actor's module")
        finally:
            shared.close()
    return first
