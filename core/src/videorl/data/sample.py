"""``Sample``: one dataset row after validation, whatever schema it came from."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

DATA_TYPES = ("video", "image", "text")
#: row keys that hold the sample id, in order of preference: the one list training, ``cache build``,
#: ``videorl reward`` and the router read (Video-R1 rows name it ``problem_id``)
ID_KEYS = ("problem_id", "id", "sample_id")
#: row keys that hold the ground truth, in order of preference (EasyVideoR1: ``answer``, Video-R1:
#: ``solution``)
GROUND_TRUTH_KEYS = ("ground_truth", "answer", "solution")


@dataclass
class Sample:
    """One training or evaluation example.

    ``ground_truth`` is the row's ``ground_truth``, ``answer`` (EasyVideoR1) or ``solution`` (Video-R1)
    as written (a string, possibly wrapped in ``<answer>…</answer>``, or JSON for grounding
    tasks). Media paths are absolute. ``offline_output`` is the offline trajectory for mix-policy
    training, when the row has one. ``origin`` (``file:line``) is where the row came from, for error messages.
    ``workflow``: the rollout workflow the row asks for (``single_turn``, ``tool_agent``, a plugin's);
    None: the run's ``rollout.workflow``.
    """

    id: str
    data_type: str
    problem: str
    problem_type: str = ""
    ground_truth: Any = None
    options: list[str] | None = None
    videos: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    offline_output: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    origin: str = ""
    workflow: str | None = None

    @property
    def has_offline_trajectory(self) -> bool:
        return self.offline_output is not None

    @property
    def media(self) -> list[str]:
        """The sample's media paths, videos first."""
        return [*self.videos, *self.images]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
