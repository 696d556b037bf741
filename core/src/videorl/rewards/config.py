"""``RewardConfig``: the ``rewards`` section of a config, declared and checked like every other section.

The loader (:mod:`videorl.config.loader`) type-checks its keys, rewrites the route shorthands with
:func:`parse_routes` and reports :meth:`RewardConfig._problems` with every other problem of the file;
:func:`videorl.config.load_rewards` runs the same loader on a bare mapping (``videorl reward --config``).
"""

# ruff: noqa: RUF009 - option() returns dataclasses.field(...), with the help text in its metadata
from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from videorl.errors import ConfigError
from videorl.option import Problems, option
from videorl.registry import normalize_name
from videorl.rewards.format import FormatRule
from videorl.tools.calls import ToolCallRecord

#: one route target: a reward name and its weight
Route = tuple[str, float]

_TARGET_KEYS = ("reward", "weight")


def parse_routes(value: Any, key: str) -> Any:
    """``rewards.routes`` with each problem type normalised and each route spelled as a list of
    ``(reward, weight)`` pairs; a route may be written as a reward name, ``{name: weight}`` or a list of
    ``{reward: name, weight: w}`` (weight 1 when left out) or ``[name, weight]`` (as dumped). Values in
    none of these forms are left for the type check to report."""
    if not isinstance(value, Mapping):
        return value
    routes: dict[str, Any] = {}
    spelled: dict[str, Any] = {}
    for problem_type, route in value.items():
        name = normalize_name(str(problem_type))
        if name in routes:
            raise ConfigError(
                f"{key}: {spelled[name]!r} and {problem_type!r} both name the problem type {name!r}"
            )
        routes[name], spelled[name] = _parse_route(route, f"{key}.{problem_type}"), problem_type
    return routes


def _parse_route(route: Any, key: str) -> Any:
    if isinstance(route, str):
        return [(route, 1.0)]
    if isinstance(route, Mapping):
        return list(route.items())
    if not isinstance(route, list):
        raise ConfigError(
            f"{key} must be a reward name, {{name: weight}} or a list of {{reward: name, weight: w}}, "
            f"got {route!r}"
        )
    targets = []
    for i, item in enumerate(route):
        if isinstance(item, Mapping):
            unknown = [str(k) for k in item if k not in _TARGET_KEYS]
            if unknown or "reward" not in item:
                close = difflib.get_close_matches(unknown[0], _TARGET_KEYS, n=1) if unknown else []
                hint = f" (did you mean {close[0]!r} for {unknown[0]!r}?)" if close else ""
                raise ConfigError(f"{key}[{i}] must be {{reward: NAME, weight: W}}{hint}, got {dict(item)!r}")
            item = (item["reward"], item.get("weight", 1.0))
        targets.append(item)
    return targets


@dataclass
class RewardConfig:
    """How samples are scored (docs/rewards.md explains each key)."""

    accuracy_weight: float | None = option(
        None,
        "Weight of the accuracy part of every task reward's score (handed to rewards that take it); null: "
        "each reward's own default (a TaskReward's: 0.9). Set alone, format_weight is 1 minus it.",
    )
    format_weight: float | None = option(
        None,
        "Weight of the format part (the format rule below); null: each reward's own default (a "
        "TaskReward's: 0.1). Set alone, accuracy_weight is 1 minus it.",
    )
    format: FormatRule = option(factory=FormatRule, help="The format rule: which response layouts count.")
    fallback: bool | None = option(
        None,
        "Without an <answer> tag, read the answer from a final-answer line, \\boxed{} or the text after "
        "</think> (the format part stays 0); null: each reward's own default (a TaskReward's: true).",
    )
    timeout: float | None = option(
        30.0,
        "Seconds one reward call may take before the sample scores 0 (per input of a batch); null: none.",
    )
    threads: int = option(8, "Synchronous reward calls run at once.")
    routes: dict[str, list[Route]] = option(
        factory=dict,
        convert=parse_routes,
        help="problem_type -> reward name, {name: weight} or a list of {reward: name, weight: w}: the score "
        "is the weighted sum of the rewards that do not abstain. Types not listed go to the reward "
        "registered under that name or alias, with weight 1.",
    )
    options: dict[str, dict[str, Any]] = option(
        factory=dict, help="Reward name -> keyword options of its factory (e.g. {math: {timeout: 5}})."
    )
    tool_call_cost: float = option(
        0.0,
        "Subtracted from an episode's reward per tool call it made (the tool_agent workflow); logged "
        "as the reward part tool_call_cost. 0: calls are free.",
    )
    invalid_call_penalty: float = option(
        0.0,
        "Subtracted from an episode's reward per invalid tool call (unreadable, unknown tool, refused "
        "arguments), on top of tool_call_cost; logged as the reward part invalid_call_penalty.",
    )

    def _problems(self) -> Problems:
        problems: Problems = []
        for key in ("accuracy_weight", "format_weight"):
            weight = getattr(self, key)
            if weight is not None and not 0 <= weight <= 1:
                problems.append((key, "must be in [0, 1]"))
        acc, fmt = self.accuracy_weight, self.format_weight
        if acc is not None and fmt is not None and not math.isclose(acc + fmt, 1.0, abs_tol=1e-9):
            problems.append(
                (
                    "accuracy_weight",
                    f"+ format_weight must be 1 (got {acc} + {fmt}), so scores stay in [0, 1]",
                )
            )
        if self.timeout is not None and not self.timeout > 0:
            problems.append(("timeout", "must be a positive number of seconds or null"))
        if self.threads < 1:
            problems.append(("threads", "must be >= 1"))
        for key in ("tool_call_cost", "invalid_call_penalty"):
            if not (math.isfinite(getattr(self, key)) and getattr(self, key) >= 0):
                problems.append((key, f"must be a finite number >= 0, got {getattr(self, key)!r}"))
        for problem_type, targets in self.routes.items():
            key = f"routes.{problem_type}"
            if not targets:
                problems.append((key, "names no reward"))
            for name, weight in targets:
                if not name.strip():
                    problems.append((key, "reward names must not be empty"))
                if not (math.isfinite(weight) and weight >= 0):
                    problems.append(
                        (key, f"weight of {name!r} must be a non-negative number, got {weight!r}")
                    )
        return problems

    def episode_parts(self, calls: Sequence[ToolCallRecord]) -> dict[str, float]:
        """The trajectory components of an episode's reward that this config weights (none by default),
        each the (negative) amount added to the router's score of the final answer."""
        out: dict[str, float] = {}
        if self.tool_call_cost:
            out["tool_call_cost"] = -self.tool_call_cost * len(calls)
        if self.invalid_call_penalty:
            out["invalid_call_penalty"] = -self.invalid_call_penalty * sum(c.invalid for c in calls)
        return out

    def common_options(self) -> dict[str, Any]:
        """The options handed to every reward factory that accepts them: the format rule, and the weights
        and fallback only where this config sets them, so that a reward keeps its own defaults otherwise
        (one weight set alone gives the other as its complement)."""
        out: dict[str, Any] = {"format_rule": self.format}
        acc, fmt = self.accuracy_weight, self.format_weight
        if acc is None and fmt is not None:
            acc = 1.0 - fmt
        elif fmt is None and acc is not None:
            fmt = 1.0 - acc
        if acc is not None and fmt is not None:
            out["accuracy_weight"], out["format_weight"] = acc, fmt
        if self.fallback is not None:
            out["fallback"] = self.fallback
        return out
