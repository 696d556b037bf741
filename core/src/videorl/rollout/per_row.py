"""Datasets that mix workflows: a row's ``workflow`` field (``"tool_agent"``, ``"single_turn"``, a
plugin's) chooses how its prompt is rolled out; rows without one take the run's ``rollout.workflow``.
:class:`PerRowWorkflow` splits each batch by workflow, runs every part through its workflow and puts
the groups back in prompt order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from videorl.rollout.workflow import RolloutWorkflow
from videorl.timing import StageTimer

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.config import TrainConfig
    from videorl.data import Sample
    from videorl.encoding import Prompt
    from videorl.episode import Episode
    from videorl.generation import RolloutEngine
    from videorl.rollout.scoring import Scorer


class PerRowWorkflow:
    """The :class:`~videorl.rollout.workflow.RolloutWorkflow` of a dataset whose rows name workflows:
    ``workflows`` by registered name, ``default`` (one of them) for rows that name none. Row names
    must already be the registered ones (the composition root checks and rewrites them)."""

    def __init__(self, default: str, workflows: Mapping[str, RolloutWorkflow]) -> None:
        if default not in workflows:
            raise ValueError(f"the default workflow {default!r} is not among {sorted(workflows)}")
        self.default, self.workflows = default, dict(workflows)
        self.name = "+".join(sorted(self.workflows))

    def prompt_tools(self, sample: Sample) -> Sequence[Mapping[str, Any]]:
        """The tools the prompt of ``sample`` offers: its workflow's (none for one without tools)."""
        offered = getattr(self.workflows[sample.workflow or self.default], "prompt_tools", None)
        return offered(sample) if offered is not None else []

    def rollout(
        self,
        config: TrainConfig,
        prompts: Sequence[Prompt],
        engine: RolloutEngine,
        scorer: Scorer,
        backend: ModelBackend,
        *,
        seed: int | None,
        first_group: int = 0,
        timer: StageTimer | None = None,
        baseline: bool = False,
    ) -> tuple[list[list[Episode]], dict[str, float]]:
        """Each workflow's prompts through it (in the order the workflows first appear), the groups in
        prompt order with group ids ``first_group + index``; the counters of every workflow (their keys
        are their own: ``tool/*`` of tool_agent, ``mix_policy/*`` of single_turn) and
        ``workflow/<name>``, the prompts each workflow rolled out."""
        by_name: dict[str, list[int]] = {}
        for i, p in enumerate(prompts):
            by_name.setdefault(p.sample.workflow or self.default, []).append(i)
        groups: list[list[Episode]] = [[] for _ in prompts]
        metrics: dict[str, float] = {}
        for name, indices in by_name.items():
            got, counters = self.workflows[name].rollout(
                config, [prompts[i] for i in indices], engine, scorer, backend, seed=seed,
                first_group=first_group, timer=timer, baseline=baseline,
            )  # fmt: skip
            for i, group in zip(indices, got, strict=True):
                for episode in group:
                    episode.group = first_group + i
                groups[i] = group
            metrics.update(counters)
            metrics[f"workflow/{name}"] = float(len(indices))
        return groups, metrics
