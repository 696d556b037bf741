"""The configuration: a typed schema (:mod:`.schema`), a loader that works for any dataclass schema
(:mod:`.loader`) and the generated reference (:mod:`.reference`).

Everything a caller needs is importable from here: ``from videorl.config import TrainConfig, load_config``.
"""

from videorl.config.loader import _parse_yaml, config_to_dict, dump_config, load_config
from videorl.config.reference import ConfigKey, config_keys, markdown_reference
from videorl.config.schema import (
    ActorConfig,
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    OptimConfig,
    Problems,
    RayConfig,
    RolloutConfig,
    TrainConfig,
    TrainerConfig,
    option,
)

__all__ = [
    "ActorConfig",
    "AlgorithmConfig",
    "ConfigKey",
    "DataConfig",
    "ModelConfig",
    "OptimConfig",
    "Problems",
    "RayConfig",
    "RolloutConfig",
    "TrainConfig",
    "TrainerConfig",
    "_parse_yaml",
    "config_keys",
    "config_to_dict",
    "dump_config",
    "load_config",
    "markdown_reference",
    "option",
]
