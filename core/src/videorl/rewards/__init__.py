"""Reward types and routing by ``problem_type``. The reward functions themselves are plugins."""

from videorl.rewards.types import MediaInfo, Reward, RewardInput, RewardOutput

__all__ = ["MediaInfo", "Reward", "RewardInput", "RewardOutput"]
