"""Reward types, the format rule, the ``TaskReward`` base and routing by ``problem_type``.

The reward functions themselves are plugins (``videorl-rewards`` ships the task types).
"""

from videorl.media.info import MediaInfo
from videorl.rewards.config import RewardConfig
from videorl.rewards.format import FormatRule
from videorl.rewards.router import RewardEvent, RewardRouter
from videorl.rewards.task import TaskReward
from videorl.rewards.types import Reward, RewardInput, RewardOutput

__all__ = [
    "FormatRule",
    "MediaInfo",
    "Reward",
    "RewardConfig",
    "RewardEvent",
    "RewardInput",
    "RewardOutput",
    "RewardRouter",
    "TaskReward",
]
