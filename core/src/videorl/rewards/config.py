"""``RewardConfig``: the ``rewards`` section of a config, validated."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from videorl.errors import ConfigError
from videorl.registry import normalize_name
from videorl.rewards.format import FormatRule

#: one route target: a reward name and its weight
Route = tuple[str, float]


@dataclass
class RewardConfig:
    """How samples are scored.

    - ``accuracy_weight``/``format_weight`` (0.9/0.1), ``format`` (a :class:`FormatRule`) and
      ``fallback`` are handed to every reward that accepts them (all :class:`TaskReward` subclasses);
    - ``timeout``: seconds one reward call may take before the sample scores 0 (``None``: no limit);
      a ``score_batch`` call gets ``timeout`` per input;
    - ``threads``: how many synchronous reward calls run at once;
    - ``routes``: ``problem_type`` → reward name, ``{name: weight}`` or a list of
      ``{reward: name, weight: w}`` (or ``[name, weight]``); the score of a sample is the weighted sum of its rewards' scores
      (rewards that abstain are left out). Types not listed go to the reward registered under that
      name or alias, with weight 1;
    - ``options``: reward name → keyword options for its factory (e.g. ``{math: {timeout: 5}}``).
    """

    accuracy_weight: float = 0.9
    format_weight: float = 0.1
    format: FormatRule = field(default_factory=FormatRule)
    fallback: bool = True
    timeout: float | None = 30.0
    threads: int = 8
    routes: dict[str, list[Route]] = field(default_factory=dict)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.timeout is not None and (
            isinstance(self.timeout, bool)
            or not isinstance(self.timeout, (int, float))
            or not self.timeout > 0
        ):
            raise ConfigError(
                f"rewards.timeout must be a positive number of seconds or null, got {self.timeout!r}"
            )
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1:
            raise ConfigError(f"rewards.threads must be a positive integer, got {self.threads!r}")
        self.format = FormatRule.from_value(self.format)
        self.routes = {normalize_name(k): _parse_route(k, v) for k, v in self.routes.items()}
        for name, opts in self.options.items():
            if not isinstance(opts, Mapping):
                raise ConfigError(
                    f"rewards.options.{name} must be a mapping of keyword options, got {opts!r}"
                )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> RewardConfig:
        """Validate a ``rewards`` mapping; an unknown key is a ``ConfigError`` naming it."""
        data = dict(data or {})
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"unknown rewards key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        return cls(**data)

    def common_options(self) -> dict[str, Any]:
        """The options handed to every reward factory that accepts them."""
        return {
            "accuracy_weight": self.accuracy_weight,
            "format_weight": self.format_weight,
            "format_rule": self.format,
            "fallback": self.fallback,
        }


def _parse_route(problem_type: str, value: Any) -> list[Route]:
    where = f"rewards.routes.{problem_type}"
    if isinstance(value, str):
        items: list[tuple[Any, Any]] = [(value, 1.0)]
    elif isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, list):
        items = []
        for item in value:
            if isinstance(item, (list, tuple)) and len(item) == 2:  # [name, weight], as dumped
                items.append((item[0], item[1]))
                continue
            if not isinstance(item, Mapping) or "reward" not in item or set(item) - {"reward", "weight"}:
                raise ConfigError(
                    f"{where}: each list item must be {{reward: NAME, weight: W}}, got {item!r}"
                )
            items.append((item["reward"], item.get("weight", 1.0)))
    else:
        raise ConfigError(f"{where}: expected a reward name, {{name: weight}} or a list, got {value!r}")
    if not items:
        raise ConfigError(f"{where}: no reward given")
    routes: list[Route] = []
    for name, weight in items:
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{where}: reward name must be a non-empty string, got {name!r}")
        if (
            isinstance(weight, bool)
            or not isinstance(weight, (int, float))
            or not math.isfinite(weight)
            or weight < 0
        ):
            raise ConfigError(f"{where}: weight of {name!r} must be a non-negative number, got {weight!r}")
        routes.append((name, float(weight)))
    return routes
