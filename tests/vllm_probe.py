"""The probe of the vLLM weight-refresh tests (test_train_vllm.py, test_vllm_checkpoint_layout.py): a video
and a text prompt, sampled by the engine, scored by a model's fp32 teacher-forced forward; and the tool_agent
run's scripted first call and its record (:func:`force_first_call`).

Imported by those tests' scripts in the subprocess that runs vLLM (vLLM changes process-wide settings that
must not leak into pytest); tests/ is on that subprocess's PYTHONPATH through the ``vllm_env`` fixture of
tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from videorl.api import PromptInput, response_logprobs
from videorl.media import VideoMetadata
from videorl.rollout import SamplingParams

#: two sampled responses of at most 8 tokens a prompt
PARAMS = SamplingParams(n=2, temperature=1.0, max_tokens=8, seed=0)


def probe_prompts(backend: Any, gen: torch.Generator) -> list[Any]:
    """The encoded probe: 4 random frames of 2x2 patches (frames 0, 5, 10, 15 of a 4 s clip at 4 fps,
    drawn from ``gen``) with a question, and a text-only prompt."""
    f = backend.factor
    frames = torch.randint(0, 256, (4, 3, 2 * f, 2 * f), dtype=torch.uint8, generator=gen)
    meta = VideoMetadata(
        source_fps=4.0,
        total_frames=16,
        duration=4.0,
        frame_indices=(0, 5, 10, 15),
        timestamps=(0.0, 1.25, 2.5, 3.75),
        source_width=2 * f,
        source_height=2 * f,
        width=2 * f,
        height=2 * f,
    )
    return [
        backend.encode(PromptInput("video", "What colour is the square?", videos=[(frames, meta)])),
        backend.encode(PromptInput("text", "Which direction does the object move?")),
    ]


def max_logprob_diff(
    backend: Any, prompts: Sequence[Any], groups: Sequence[Sequence[Any]], model: Any
) -> tuple[float, int]:
    """The largest difference of the engine's per-token log-probs (``groups``, one per prompt) from
    ``model``'s teacher-forced forward of the same responses, and the number of tokens compared."""
    forbidden = backend.forbidden_token_ids()
    diffs = []
    for enc, group in zip(prompts, groups, strict=True):
        responses = [c.token_ids for c in group]
        inputs = backend.collate([enc] * len(responses), responses)
        with torch.no_grad():
            logits = model(**inputs.model_kwargs()).logits
        ours = response_logprobs(logits, inputs, forbidden=forbidden)
        diffs += [
            abs(float(ours[row, j]) - lp) for row, c in enumerate(group) for j, lp in enumerate(c.logprobs)
        ]
    return max(diffs), len(diffs)


#: the tool call the scripted first turn writes: 2 frames of the 0.5 s … 1.5 s window (inside the demo's
#: 2-second clips)
CALL = '<tool_call>{"name": "get_frames", "arguments": {"start": 0.5, "end": 1.5, "n": 2}}</tool_call>'


class FirstTurnCall:
    """A rollout engine around ``engine`` whose first turn is :data:`CALL` (a random tiny model never
    writes one), with ``model``'s log-probs of those tokens after the prompt (the actor's, at step 1);
    ``engine`` still sees the first turn's prompts (it generates from them, its tokens are replaced), so
    its caches are those of a run where it wrote the call. Later turns are ``engine``'s own."""

    def __init__(self, engine: Any, backend: Any, model: Any) -> None:
        self.engine, self.backend, self.model = engine, backend, model
        self.start = backend.tokenizer.convert_tokens_to_ids("<|im_start|>")
        self.capabilities = getattr(engine, "capabilities", None)

    def generate(self, prompts: Sequence[Any], params: Any) -> list[list[Any]]:
        from videorl.generation import Completion

        out = self.engine.generate(prompts, params)
        for i, prompt in enumerate(prompts):
            if prompt.prompt_ids.count(self.start) != 3:  # system, user, assistant: the first turn
                continue
            ids = [*self.backend.tokenizer.encode(CALL), self.backend.end_of_turn_id()]
            inputs = self.backend.collate([prompt], [ids])
            with torch.no_grad():
                logits = self.model(**inputs.model_kwargs()).logits
            lp = response_logprobs(logits, inputs, forbidden=self.backend.forbidden_token_ids())[0]
            out[i] = [Completion(ids, lp.tolist(), "stop") for _ in out[i]]
        return out

    def __getattr__(self, name: str) -> Any:  # update_weights, close, ...: the engine's
        return getattr(self.engine, name)


class EncoderWatch:
    """What a vLLM engine in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) does per ``generate``
    call: the grids its vision tower encodes (a hook on the model's ``visual``) and, per request, the
    prompt tokens and those its prefix cache held (``num_cached_tokens``)."""

    def __init__(self, engine: Any) -> None:
        self.calls: list[dict[str, Any]] = []
        self._grids: list[list[int]] = []
        engine.llm.apply_model(self._install)
        llm_generate = engine.llm.generate

        def generate(*args: Any, **kwargs: Any) -> Any:
            self._grids = []
            outputs = llm_generate(*args, **kwargs)
            self.calls.append({
                "encoded": self._grids,
                "prompt_tokens": [len(o.prompt_token_ids or ()) for o in outputs],
                "cached_tokens": [int(o.num_cached_tokens or 0) for o in outputs],
            })  # fmt: skip
            return outputs

        engine.llm.generate = generate

    def _install(self, model: Any) -> None:
        def hook(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
            grid = kwargs.get("grid_thw", args[1] if len(args) > 1 else None)
            self._grids += [[int(x) for x in g] for g in grid]

        model.visual.register_forward_pre_hook(hook, with_kwargs=True)


def force_first_call(record: Path) -> Callable[[], None]:
    """Patch this process's ``videorl train`` so that its engine's first turn is :data:`CALL`
    (:class:`FirstTurnCall` with the actor's module) and the engine is watched (:class:`EncoderWatch`);
    after each tool_agent rollout, one JSON line is appended to ``record``: the engine calls and the
    :func:`episode_records` against the actor's module. Returns the undo."""
    import json

    from videorl.rollout.tool_agent import ToolAgent
    from videorl.train import compose

    make, rollout = compose.make_rank_engine, ToolAgent.rollout
    state: dict[str, Any] = {}

    def make_rank_engine(config: Any, plugins: Any, backend: Any, model: Any, dist: Any) -> Any:
        engine, shares = make(config, plugins, backend, model, dist)
        state.update(model=model, watch=EncoderWatch(engine))
        return FirstTurnCall(engine, backend, model), shares

    def agent_rollout(
        self: Any, config: Any, prompts: Any, engine: Any, scorer: Any, backend: Any, **kw: Any
    ) -> Any:
        groups, metrics = rollout(self, config, prompts, engine, scorer, backend, **kw)
        rows = episode_records([e for g in groups for e in g], state["model"], backend)
        with open(record, "a", encoding="utf-8") as f:
            f.write(json.dumps({"calls": state["watch"].calls, "episodes": rows, "metrics": metrics}) + "\n")
        state["watch"].calls = []
        return groups, metrics

    compose.make_rank_engine = make_rank_engine  # type: ignore[assignment]
    ToolAgent.rollout = agent_rollout  # type: ignore[method-assign]

    def undo() -> None:
        compose.make_rank_engine = make  # type: ignore[assignment]
        ToolAgent.rollout = rollout  # type: ignore[method-assign]

    return undo


def episode_records(episodes: Sequence[Any], model: Any, backend: Any) -> list[dict[str, Any]]:
    """Per episode: its segments (trained, media, tokens), whether every policy token has a finite
    engine log-prob and every reply token NaN, and the largest gap to ``model``'s teacher-forced
    log-probs over the whole episode (replies' media included)."""
    from videorl.actor.update import forward_responses

    with torch.no_grad():
        logp, _, _ = forward_responses(model, backend, episodes, sorted(backend.forbidden_token_ids()))
    rows = []
    for row, e in enumerate(episodes):
        trained = torch.tensor(e.loss_mask or [True] * len(e.response_ids))
        engine_lp = torch.tensor(e.response_logprobs)
        rows.append({
            "trained": [s.trained for s in e.segments],
            "media": [list(s.media) for s in e.segments],
            "tokens": [len(s.token_ids) for s in e.segments],
            "policy_finite": bool(torch.isfinite(engine_lp[trained]).all()),
            "replies_nan": bool(torch.isnan(engine_lp[~trained]).all()),
            "max_gap": float((logp[row, : len(trained)][trained] - engine_lp[trained]).abs().max()),
        })  # fmt: skip
    return rows


def agent_episodes(engine: Any, backend: Any, model: Any) -> list[dict[str, Any]]:
    """Two tool_agent episodes of a 16-frame, 8-second clip (2 fps) whose first turn is :data:`CALL`
    (:class:`FirstTurnCall` around ``engine``, ``model``'s log-probs) and whose second ``engine``
    samples (20 tokens) after the reply's 2 frames: :func:`episode_records` of them."""
    from videorl.config import TrainConfig
    from videorl.data import Sample
    from videorl.encoding import Prompt
    from videorl.plugins import load_plugins
    from videorl.rollout.factory import make_workflow
    from videorl.tools import tool_spec

    config = TrainConfig()
    r = config.rollout
    r.n, r.tools, r.max_turns, r.temperature = 2, ["get_frames"], 2, 1.0
    r.max_response_length = 160  # the call and the reply take 140 of the tiny Qwen tokenizer's tokens
    workflow: Any = make_workflow(load_plugins(), "tool_agent", config)
    side = 2 * backend.factor
    frames = torch.randint(
        0, 256, (16, 3, side, side), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    video = (frames, VideoMetadata.every_frame(16, side, side, fps=2.0))
    spec = tool_spec(workflow.tools["get_frames"])
    encoded = backend.encode(PromptInput("agent", "Which colour?", videos=[video], tools=[spec]))
    prompt = Prompt(Sample(id="agent", data_type="video", problem="Which colour?"), encoded, None)
    groups, _ = workflow.rollout(
        config, [prompt], FirstTurnCall(engine, backend, model), lambda e: None, backend, seed=0
    )
    return episode_records(groups[0], model, backend)
