"""``videorl.testing.assert_workflow_contract`` on the built-in workflows (tool_agent with each built-in
tool, single_turn) and on workflows broken on purpose, each failing with the message that names what
it broke; and the scripted engine the contract (and the eval tests) drive workflows with."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from videorl.backend import backend_for_model
from videorl.config import TrainConfig
from videorl.generation import SamplingParams
from videorl.model_inputs import PromptInput
from videorl.plugins import load_plugins
from videorl.rollout.factory import make_workflow
from videorl.rollout.tool_agent import ToolAgent
from videorl.testing import ScriptedEngine, assert_workflow_contract, tool_agent
from videorl.tools.video import GetFrames, Seek, Zoom

CALLS = {
    "get_frames": '<tool_call>{"name": "get_frames", "arguments": {"start": 2, "end": 4, "n": 2}}'
    "</tool_call>",
    "seek": '<tool_call>{"name": "seek", "arguments": {"t": 3}}</tool_call>',
    "zoom": '<tool_call>{"name": "zoom", "arguments": {"t": 1, "box": [0, 0, 0.5, 0.5]}}</tool_call>',
}


@pytest.fixture(scope="module")
def backend(tiny_model_dir: Callable[[str], Path]) -> Any:
    return backend_for_model(tiny_model_dir("qwen2_5_vl"), load_plugins().model_backends)


def test_the_scripted_engine_writes_each_samples_turns_and_cuts_at_max_tokens(backend: Any) -> None:
    engine = ScriptedEngine(backend, {"a": ["one", "two"]}, default=["other"])
    a, b = (backend.encode(PromptInput(i, "q")) for i in ("a", "b"))
    params = SamplingParams(n=2, max_tokens=50)
    first = engine.generate([a, a, b], params)
    second = engine.generate([a], SamplingParams(n=1, max_tokens=1))
    third = engine.generate([a], params)
    end = backend.end_of_turn_id()
    tokens = backend.tokenizer.encode
    assert [len(g) for g in first] == [2, 2, 2]  # n per prompt; "a" twice in one call is one turn
    assert first[0][0].token_ids == [*tokens("one"), end] and first[2][0].token_ids == [*tokens("other"), end]
    assert second[0][0].token_ids == tokens("two")[:1] and second[0][0].finish_reason == "length"
    assert third[0][0].token_ids == [*tokens("two"), end]  # past the script: its last turn again
    assert first[0][0].logprobs[:2] == [-0.5, -0.501]
    assert len(engine.asked) == 6 + 1 + 2 and engine.asked[0][0] is a


@pytest.mark.parametrize("name", ["get_frames", "seek", "zoom"])
def test_tool_agent_with_each_builtin_tool_passes_the_workflow_contract(backend: Any, name: str) -> None:
    config = TrainConfig()
    config.rollout = replace(config.rollout, n=2, tools=[name], max_response_length=4096)  # zoom: ~1k
    workflow = make_workflow(load_plugins(), "tool_agent", config)
    episodes = assert_workflow_contract(workflow, config, backend, call=CALLS[name])
    assert [[s.trained for s in e.segments] for e in episodes] == [[True, False, True]] * 2


def test_single_turn_passes_the_workflow_contract(backend: Any) -> None:
    config = TrainConfig()
    config.rollout = replace(config.rollout, n=2, max_response_length=64)
    (episode, _) = assert_workflow_contract(
        make_workflow(load_plugins(), "single_turn", config), config, backend
    )
    assert backend.tokenizer.decode(episode.response_ids, skip_special_tokens=True) == "<answer>A</answer>"


class TrainsOnReplies(ToolAgent):
    """Breaks the loss mask: the tool's replies are trained on."""

    def rollout(self, *args: Any, **kwargs: Any) -> Any:
        groups, metrics = super().rollout(*args, **kwargs)
        for episode in groups[0]:
            for segment in episode.segments:
                segment.trained = True
                segment.logprobs = [0.0 if math.isnan(x) else x for x in segment.logprobs]
        return groups, metrics


class LosesLogprobs(ToolAgent):
    """Breaks the engine's log-probs: replaced by zeros."""

    def rollout(self, *args: Any, **kwargs: Any) -> Any:
        groups, metrics = super().rollout(*args, **kwargs)
        for episode in groups[0]:
            for segment in episode.segments:
                if segment.trained:
                    segment.logprobs = [0.0] * len(segment.token_ids)
        return groups, metrics


class SaysNothingAtTheBudget(ToolAgent):
    """Breaks the ending's reason: an episode the budget ended says ``stop``."""

    def rollout(self, *args: Any, **kwargs: Any) -> Any:
        groups, metrics = super().rollout(*args, **kwargs)
        for episode in groups[0]:
            episode.completion = replace(episode.completion, finish_reason="stop")
        return groups, metrics


class ReRenders(ToolAgent):
    """Breaks append-only tokens: each reply is appended twice to what the engine continues."""

    def _turn(self, config: Any, backend: Any, encode: Any, t: Any, completion: Any, counts: Any) -> None:
        before = len(t.segments)
        super()._turn(config, backend, encode, t, completion, counts)
        if len(t.segments) > before + 1:
            from videorl.model_inputs import continue_encoded

            t.context = continue_encoded(t.context, t.segments[-1].token_ids)


@pytest.mark.parametrize(
    ("broken", "says"),
    [
        (TrainsOnReplies, r"must be a segment with trained=False \(loss mask 0\)"),
        (LosesLogprobs, "the log-probs are not the engine's"),
        (SaysNothingAtTheBudget, "must say why"),
        (ReRenders, "must be append-only tokens"),
    ],
    ids=lambda x: x.__name__ if isinstance(x, type) else "",
)
def test_a_broken_workflow_fails_the_contract_saying_what_it_broke(
    backend: Any, broken: type[ToolAgent], says: str
) -> None:
    workflow, config = tool_agent(GetFrames(), Seek(), Zoom())
    good = ToolAgent(workflow.tools)
    assert_workflow_contract(good, config, backend, call=CALLS["get_frames"])
    with pytest.raises(AssertionError, match=says):
        assert_workflow_contract(broken(workflow.tools), config, backend, call=CALLS["get_frames"])
