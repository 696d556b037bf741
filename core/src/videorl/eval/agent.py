"""Benchmark rows answered through a rollout workflow: ``videorl eval run --workflow tool_agent`` and a
``trainer.benchmarks`` entry's ``workflow``.

The workflow is made as training makes it (:func:`videorl.rollout.factory.make_workflow`: the registry,
its ``setup`` resolving the tools), from a training config whose rollout section is evaluation's: one
episode per row (``n=1``), the evaluation's temperature, and ``sampling.max_tokens`` as the response
budget of the whole episode (every turn and tool reply). Each row's prompt offers the workflow's tools;
the episode's last turn is the response the adapter scores, as a single-turn answer is; its calls and
turns go into the row's prediction record (:func:`episode_record`).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from videorl.config import TrainConfig
from videorl.config.schema import ToolBudgets
from videorl.data import Sample
from videorl.encoding import Prompt
from videorl.rollout.factory import make_workflow

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.episode import Episode
    from videorl.generation import Completion, RolloutEngine, SamplingParams
    from videorl.model_inputs import EncodedPrompt, PromptInput
    from videorl.plugins import Plugins
    from videorl.rollout.workflow import RolloutWorkflow

__all__ = ["AGENT_KEYS", "AgentRollout", "agent_base", "episode_record", "eval_rollout_config", "make_agent"]

#: the rollout keys that say how an agent row is answered (recorded in the run's settings)
AGENT_KEYS = tuple(f.name for f in fields(ToolBudgets))


def eval_rollout_config(base: TrainConfig, sampling: SamplingParams) -> TrainConfig:
    """``base`` whose rollout samples as evaluation does: one episode per row with ``sampling``'s
    temperature, top-p, top-k and seed, ``max_tokens`` the budget of the whole episode; no
    mix-policy (a benchmark row has no offline trajectory)."""
    rollout = replace(
        base.rollout, n=1, temperature=sampling.temperature, top_p=sampling.top_p,
        top_k=sampling.top_k if sampling.top_k > 0 else -1, max_response_length=sampling.max_tokens,
        enable_mix_policy=False,
    )  # fmt: skip
    return replace(base, rollout=rollout, seed=base.seed if sampling.seed is None else sampling.seed)


def episode_record(episode: Episode) -> dict[str, Any]:
    """What a prediction record adds for a row answered through a workflow: its policy ``turns``, why
    it ``end``-ed (``stop``: it answered; ``length``, ``max_turns``, ``visual_tokens``: a budget) and
    its ``tool_calls``, each as asked (name, arguments, turn), whether it was ``valid``, the
    ``reason`` it was refused and the ``frames`` it fetched."""
    calls = []
    for call in episode.tool_calls:
        entry = asdict(call)
        entry["valid"] = not entry.pop("invalid")
        if entry["reason"] is None:
            del entry["reason"]
        calls.append(entry)
    turns = sum(1 for s in episode.turns if s.trained)
    return {"turns": turns, "end": episode.completion.finish_reason, "tool_calls": calls}


@dataclass
class AgentRollout:
    """A registered workflow answering benchmark rows: ``name`` (registered), the workflow, and the
    training ``config`` it reads (:func:`eval_rollout_config`)."""

    name: str
    workflow: RolloutWorkflow
    config: TrainConfig

    def settings(self) -> dict[str, Any]:
        """The run settings this answer depends on (``results.json``: a resume with others is refused)."""
        return {"name": self.name, **{key: getattr(self.config.rollout, key) for key in AGENT_KEYS}}

    def offer(self, prompt: PromptInput) -> PromptInput:
        """``prompt`` offering the workflow's tools (rendered in its system turn)."""
        offered = getattr(self.workflow, "prompt_tools", None)
        if offered is None:
            return prompt
        return replace(prompt, tools=list(offered(_sample(prompt.sample_id, bool(prompt.videos)))))

    def generate(
        self, engine: RolloutEngine, backend: ModelBackend, prompts: Sequence[EncodedPrompt]
    ) -> list[tuple[Completion, dict[str, Any]]]:
        """One episode per prompt: its last turn (the answer to score) and :func:`episode_record`."""
        batch = [Prompt(_sample(p.sample_id, bool(p.prompt.videos)), p, None) for p in prompts]
        groups, _ = self.workflow.rollout(
            self.config, batch, engine, _unscored, backend, seed=self.config.seed
        )
        return [(group[0].completion, episode_record(group[0])) for group in groups]


def _sample(sample_id: str, video: bool) -> Sample:
    return Sample(id=sample_id, data_type="video" if video else "text", problem="")


def _unscored(episodes: Sequence[Episode]) -> None:
    """Evaluation scores the answer with the benchmark's adapter, not the training rewards."""


def make_agent(
    plugins: Plugins, name: str, base: TrainConfig, sampling: SamplingParams, *, key: str
) -> AgentRollout:
    """The workflow ``name`` made as training makes it, to answer rows sampled with ``sampling``
    (``base``: the rollout keys it reads, e.g. ``tools``); ``key`` names the setting in errors (an
    unknown name lists the closest registered ones)."""
    config = eval_rollout_config(base, sampling)
    workflow = make_workflow(plugins, name, config, key=key)
    return AgentRollout(plugins.rollout_workflows.canonical(name), workflow, config)


def agent_base(workflow: str, budgets: ToolBudgets) -> TrainConfig:
    """A training config holding an evaluation's workflow and tool budgets."""
    config = TrainConfig()
    config.rollout = replace(
        config.rollout, workflow=workflow, **{key: copy.copy(getattr(budgets, key)) for key in AGENT_KEYS}
    )
    return config
