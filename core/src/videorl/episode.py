"""EPISODE"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from videorl.rollout import Completion

if TYPE_CHECKING:
    from videorl.encoding import Prompt


@dataclass
class Trajectory:
    """One response of a group, with everything the update and the metrics need."""

    prompt: Prompt
    group: int
    completion: Completion
    offline: bool = False
    baseline: bool = False  # an estimator's extra response (ReMax's greedy one): scored, never trained on
    reward: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)
    advantage: float = 0.0
    ref_logprobs: list[float] | None = None  # from reference workers (Ray, split placement)
    version: int = 0  # the policy version (step of its last update) that generated it (Ray)
