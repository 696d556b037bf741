"""One section of a config loaded alone, checked exactly as in a config file."""

# ruff: noqa: RUF009 - option() returns dataclasses.field(...), with the help text in its metadata
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from videorl.config.loader import load
from videorl.option import option
from videorl.rewards.config import RewardConfig


@dataclass
class _RewardsOnly:
    """A schema of the rewards section alone, so that its problems name ``rewards.KEY``."""

    rewards: RewardConfig = option(factory=RewardConfig, help="The rewards section.")


def load_rewards(data: Mapping[str, Any] | None) -> RewardConfig:
    """The ``rewards`` section from a mapping (a config file's ``rewards:``, ``videorl reward --config``),
    checked as in a config file: a :class:`~videorl.errors.ConfigError` lists every problem, an unknown
    key with the closest valid ones."""
    return load(_RewardsOnly, data={"rewards": dict(data or {})}).rewards
