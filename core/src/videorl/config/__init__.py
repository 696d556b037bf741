"""The configuration: the training schema (:mod:`.schema`), a loader that knows no schema
(:mod:`.loader`) and the generated reference (:mod:`.reference`); how a schema declares its keys is
:mod:`videorl.option`.

Everything a caller needs is importable from here: ``from videorl.config import TrainConfig, load_config``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, overload

from videorl.config.loader import ParsedYaml, config_to_dict, dump_config, load, parse_yaml
from videorl.config.reference import ConfigKey, config_keys, markdown_reference
from videorl.config.run import BenchmarkConfig, RayConfig, TrainerConfig
from videorl.config.schema import (
    ActorConfig,
    AlgorithmConfig,
    DataConfig,
    LoraConfig,
    ModelConfig,
    OptimConfig,
    RolloutConfig,
    TrainConfig,
)
from videorl.config.sections import load_rewards
from videorl.option import Problems, option

T = TypeVar("T")


@overload
def load_config(
    path: str | Path | None = None, overrides: Sequence[str] = (), *, data: Mapping[str, Any] | None = None
) -> TrainConfig: ...
@overload
def load_config(
    path: str | Path | None = None,
    overrides: Sequence[str] = (),
    *,
    schema: type[T],
    data: Mapping[str, Any] | None = None,
) -> T: ...
def load_config(
    path: str | Path | None = None,
    overrides: Sequence[str] = (),
    *,
    schema: type[Any] = TrainConfig,
    data: Mapping[str, Any] | None = None,
) -> Any:
    """The training configuration (or one of ``schema``) from a YAML file, from ``data`` or the defaults,
    with ``key=value`` overrides applied: :func:`videorl.config.loader.load`."""
    return load(schema, path, overrides, data=data)


__all__ = [
    "ActorConfig",
    "AlgorithmConfig",
    "BenchmarkConfig",
    "ConfigKey",
    "DataConfig",
    "LoraConfig",
    "ModelConfig",
    "OptimConfig",
    "ParsedYaml",
    "Problems",
    "RayConfig",
    "RolloutConfig",
    "TrainConfig",
    "TrainerConfig",
    "config_keys",
    "config_to_dict",
    "dump_config",
    "load_config",
    "load_rewards",
    "markdown_reference",
    "option",
    "parse_yaml",
]
