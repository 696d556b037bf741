"""The public API for plugin authors: everything a reward, benchmark or model-backend plugin imports.

Plugins (the first-party ones included) import from here and from ``videorl.hookimpl`` only, as a
third party would. Importing this module is cheap: no torch, no vllm.
"""

from videorl.benchmark import Benchmark, BenchmarkRow
from videorl.errors import (
    AlignmentError,
    ConfigError,
    DataError,
    RegistryError,
    UnknownComponentError,
    VideorlError,
)
from videorl.hookspecs import hookimpl
from videorl.registry import Register
from videorl.rewards.types import MediaInfo, Reward, RewardInput, RewardOutput

__all__ = [
    "AlignmentError",
    "Benchmark",
    "BenchmarkRow",
    "ConfigError",
    "DataError",
    "MediaInfo",
    "Register",
    "RegistryError",
    "Reward",
    "RewardInput",
    "RewardOutput",
    "UnknownComponentError",
    "VideorlError",
    "hookimpl",
]
