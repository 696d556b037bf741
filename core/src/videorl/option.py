"""How a config schema declares its keys to the loader (:mod:`videorl.config.loader`).

A schema is nested dataclasses. Each field is declared with :func:`option`: its default, the help text
docs/training.md is generated from and, for a key with shorthand forms, a converter that rewrites
what the user wrote into the annotated type before the loader checks it. A section may add
``_problems() -> Problems`` for range and cross-key checks; the loader reports those with every other
problem. The training schema, the evaluation schema, the rewards section and the algorithm components
all declare themselves this way.

This module imports nothing of videorl's, so any section (the rewards section, which the training
schema includes) can use it without an import circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, field
from typing import Any

#: (key relative to the section, message), e.g. ``("timeout", "must be > 0")``
Problems = list[tuple[str, str]]

#: ``convert(value, key)``: the value in the field's annotated type (the loader then checks it), or a
#: :class:`~videorl.errors.ConfigError` saying what ``key`` (the full dotted key) accepts
Converter = Callable[[Any, str], Any]


def option(
    default: Any = MISSING, help: str = "", *, factory: Any = MISSING, convert: Converter | None = None
) -> Any:
    """A dataclass field with its documentation (``help`` goes into docs/training.md) and, optionally,
    the converter of its shorthand forms."""
    metadata: dict[str, Any] = {"help": help}
    if convert is not None:
        metadata["convert"] = convert
    if factory is not MISSING:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)
