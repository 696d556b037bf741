"""A scripted rollout engine (:class:`ScriptedEngine`) and the contract check of a rollout workflow
(:func:`assert_workflow_contract`); :mod:`videorl.testing` exports both."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from videorl.config import TrainConfig
from videorl.data import Sample
from videorl.encoding import Prompt
from videorl.errors import ConfigError
from videorl.generation import Completion, EngineCapabilities, EngineSpec, SamplingParams
from videorl.model_inputs import PromptInput
from videorl.rollout.tool_agent import ToolAgent
from videorl.rollout.workflow import RolloutWorkflow
from videorl.testing.backend import contract_video
from videorl.tools import Tool, check_tool_schema

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.episode import Episode
    from videorl.model_inputs import EncodedPrompt

__all__ = ["ScriptedEngine", "assert_workflow_contract", "tool_agent"]


class ScriptedEngine:
    """A rollout engine whose turns are written in advance: the ``k``-th time a sample is asked (its
    ``k``-th turn: one ``generate`` call counts once per sample id) it writes ``replies[sample_id][k]``
    (the last one again past the end; ``default`` for ids not listed), ended by the backend's
    end-of-turn token and cut to ``max_tokens`` (``finish_reason`` ``length``). Token ``i`` of a turn
    gets the log-prob ``-0.5 - i / 1000``, so a check can tell the engine's values were kept.

    ``asked`` records every ``(context, completion)`` in order. A plugin registers a subclass setting
    ``replies``/``default`` as class attributes: ``from_spec`` takes no options.
    """

    capabilities: ClassVar[EngineCapabilities] = EngineCapabilities(
        weights_layout="transformers", own_devices=False, request_format="encoded"
    )
    replies: ClassVar[Mapping[str, Sequence[str]]] = {}
    default: ClassVar[Sequence[str]] = ("",)

    def __init__(
        self,
        backend: ModelBackend,
        replies: Mapping[str, Sequence[str]] | None = None,
        default: Sequence[str] | None = None,
    ) -> None:
        self.backend = backend
        self.script = dict(type(self).replies if replies is None else replies)
        self.fallback = list(type(self).default if default is None else default)
        self.turns: Counter[str] = Counter()
        self.asked: list[tuple[EncodedPrompt, Completion]] = []

    @classmethod
    def from_spec(cls, backend: ModelBackend, spec: EngineSpec, options: Mapping[str, Any]) -> ScriptedEngine:
        if options:
            raise ConfigError(f"engine {spec.name!r} takes no options; got {', '.join(sorted(options))}")
        return cls(backend)

    def _completion(self, sample_id: str, turn: int, max_tokens: int) -> Completion:
        texts = self.script.get(sample_id, self.fallback)
        text = texts[min(turn, len(texts) - 1)] if texts else ""
        ids = [*self.backend.tokenizer.encode(text, add_special_tokens=False), self.backend.end_of_turn_id()]
        reason = "length" if len(ids) > max_tokens else "stop"
        ids = ids[:max_tokens]
        return Completion(ids, [-0.5 - i / 1000 for i in range(len(ids))], reason)

    def generate(self, prompts: Sequence[EncodedPrompt], params: SamplingParams) -> list[list[Completion]]:
        out = []
        for prompt in prompts:
            group = [self._completion(prompt.sample_id, self.turns[prompt.sample_id], params.max_tokens)]
            self.asked += [(prompt, c) for c in group * params.n]
            out.append(group * params.n)
        self.turns.update({p.sample_id for p in prompts})
        return out

    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        """Scripted: there are no weights."""

    def close(self) -> None:
        """Nothing to release."""


def tool_agent(*tools: Tool, **rollout: Any) -> tuple[ToolAgent, TrainConfig]:
    """The built-in ``tool_agent`` workflow offering ``tools`` (objects: a plugin's, before it is
    installed) and a training config for it: two episodes per prompt, 512 response tokens, the
    ``rollout`` keys given (``max_turns=3``, ...). For :func:`assert_workflow_contract`."""
    for tool in tools:
        check_tool_schema(tool)
    config = TrainConfig()
    settings: dict[str, Any] = {"n": 2, "max_response_length": 512, **rollout}
    config.rollout = replace(config.rollout, tools=[t.name for t in tools], **settings)
    return ToolAgent({t.name: t for t in tools}), config


def contract_prompt(backend: ModelBackend, workflow: Any, sample_id: str = "contract") -> Prompt:
    """A video prompt (8 frames of an 8-second clip, 2 factors a side) offering ``workflow``'s tools."""
    sample = Sample(id=sample_id, data_type="video", problem="What colour is the square?")
    tools = getattr(workflow, "prompt_tools", None)
    video = contract_video(2 * backend.factor, 8, 0)
    encoded = backend.encode(
        PromptInput(sample_id, sample.problem, videos=[video], tools=list(tools(sample)) if tools else [])
    )
    return Prompt(sample, encoded, None)


def _check_episode(
    name: str, episode: Episode, prompt: Prompt, asked: Sequence[tuple[Any, Completion]]
) -> int:
    """One episode against what the engine was asked and wrote; returns its observation segments."""
    context = list(prompt.require_encoded().prompt_ids)
    observations = 0
    for k, segment in enumerate(episode.turns):
        where = f"{name}: segment {k}"
        assert len(segment.logprobs) == len(segment.token_ids), (
            f"{where}: {len(segment.logprobs)} log-probs for {len(segment.token_ids)} tokens"
        )
        if not segment.trained:
            observations += 1
            if segment.observation is not None:  # a reply is appended whole, never cut inside its media
                assert segment.token_ids == segment.observation.prompt_ids, (
                    f"{where}: the observation's tokens are not the encoded reply (cut inside it?)"
                )
            context += segment.token_ids
            continue
        n = len(segment.token_ids)
        turns = [c for p, c in asked if p.prompt_ids == context]
        made = [c for c in turns if c.token_ids[:n] == segment.token_ids]
        shown = any(p.prompt_ids[: len(context) + n] == context + segment.token_ids for p, _ in asked)
        assert made or shown or turns, (
            f"{where}: the engine never generated from the prompt followed by the episode's earlier "
            "segments: the trajectory must be append-only tokens (no earlier turn re-rendered)"
        )
        assert made, (
            f"{where} (trained) holds {n} tokens the engine did not write after this context: an "
            "environment's tokens (a tool's reply) must be a segment with trained=False (loss mask 0)"
        )
        assert segment.logprobs == made[0].logprobs[:n], (
            f"{where}: the log-probs are not the engine's for the tokens it generated"
        )
        context += segment.token_ids
    assert episode.response_ids == context[len(prompt.require_encoded().prompt_ids) :], (
        f"{name}: response_ids are not the segments' tokens in order"
    )
    mask = episode.loss_mask or [True] * len(episode.response_ids)
    trained = [s.trained for s in episode.turns for _ in s.token_ids]
    assert mask == trained, f"{name}: the loss mask is not 1 on generated and 0 on observation tokens"
    return observations


def _rollout(
    workflow: RolloutWorkflow,
    config: TrainConfig,
    backend: ModelBackend,
    prompt: Prompt,
    script: Sequence[str],
) -> tuple[list[Episode], dict[str, float], ScriptedEngine]:
    engine = ScriptedEngine(backend, {prompt.sample.id: script})
    scored: list[Episode] = []
    groups, metrics = workflow.rollout(
        config, [prompt], engine, scored.extend, backend, seed=0, first_group=3
    )
    n = config.rollout.n
    assert isinstance(groups, list) and len(groups) == 1 and len(groups[0]) == n, (
        f"rollout returned {[len(g) for g in groups]} episodes per group for 1 prompt and rollout.n={n}"
    )
    assert all(e.group == 3 for e in groups[0]), "episodes must carry the group id first_group + index"
    assert len(scored) == n, f"the scorer saw {len(scored)} episodes of {n}"
    assert isinstance(metrics, dict) and all(
        isinstance(k, str) and isinstance(v, float) and math.isfinite(v) for k, v in metrics.items()
    ), f"the counters must be a dict of finite floats: {metrics}"
    return groups[0], metrics, engine


def assert_workflow_contract(
    workflow: Any,
    config: TrainConfig,
    backend: ModelBackend,
    *,
    call: str | None = None,
    answer: str = "<answer>A</answer>",
) -> list[Episode]:
    """Check a rollout workflow (what ``register_rollout_workflows`` registers, made and set up, e.g.
    by :func:`videorl.rollout.factory.make_workflow`) with ``config`` (its ``rollout`` section: ``n``
    episodes per prompt) on ``backend``, driven by a :class:`ScriptedEngine` over a video prompt:

    - the policy writes ``call`` (a turn the workflow acts on: a valid tool call; None for a workflow
      without an environment), then ``answer``: ``n`` episodes in one group with the group id asked
      for, every one given to the scorer, the counters finite floats;
    - append-only tokens: every turn is generated from the prompt followed by the episode's earlier
      segments, token for token;
    - the loss mask is 1 exactly on the tokens the engine generated, 0 on observation tokens (a reply
      is a ``trained=False`` segment, appended whole), and every generated token keeps the engine's
      log-prob (one per token);
    - budgets end an episode with a reason: with ``call`` written every turn and ``max_turns=2``, and
      with a response budget one token past the call, each episode ends (``finish_reason`` not
      ``stop``) within its budget of turns and tokens.

    Returns the episodes of the first rollout.
    """
    name = getattr(workflow, "name", type(workflow).__name__)
    assert isinstance(workflow, RolloutWorkflow), (
        f"{name}: no rollout(...) method (videorl.api.RolloutWorkflow)"
    )
    prompt = contract_prompt(backend, workflow)
    script = [call, answer] if call is not None else [answer]
    episodes, _, engine = _rollout(workflow, config, backend, prompt, script)
    observations = [
        _check_episode(f"{name}, episode {i}", e, prompt, engine.asked) for i, e in enumerate(episodes)
    ]
    if call is None:
        return episodes
    assert all(observations), (
        f"{name}: the turn {call!r} was answered by no observation segment (the episodes ended: "
        f"{[e.completion.finish_reason for e in episodes]}; a reply longer than rollout.max_response_length "
        "ends an episode with length)"
    )
    assert all(e.completion.finish_reason == "stop" for e in episodes), (
        f"{name}: an episode that answered ended with {[e.completion.finish_reason for e in episodes]}"
    )
    turns = replace(config, rollout=replace(config.rollout, max_turns=2))
    calls = len(backend.tokenizer.encode(call, add_special_tokens=False)) + 1
    length = replace(config, rollout=replace(config.rollout, max_response_length=calls + 1))
    for budget, limited in (("max_turns=2", turns), (f"max_response_length={calls + 1}", length)):
        ended, _, engine = _rollout(workflow, limited, backend, prompt, [call])
        for i, episode in enumerate(ended):
            where = f"{name} with {budget}, episode {i}"
            _check_episode(where, episode, prompt, engine.asked)
            reason = episode.completion.finish_reason
            assert isinstance(reason, str) and reason and reason != "stop", (
                f"{where}: an episode the budget ended must say why (finish_reason), not {reason!r}"
            )
            assert sum(s.trained for s in episode.turns) <= limited.rollout.max_turns, (
                f"{where}: too many turns"
            )
            assert len(episode.response_ids) <= limited.rollout.max_response_length, (
                f"{where}: {len(episode.response_ids)} response tokens past the budget"
            )
    return episodes
