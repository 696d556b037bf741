"""The configuration reference: every key of a schema with its type, default and help (the tables
generated into docs/training.md and docs/benchmarks.md, and ``videorl eval run``'s flag help)."""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import yaml

from videorl.config.loader import config_to_dict


@dataclass(frozen=True)
class ConfigKey:
    """One documented key of a schema."""

    key: str
    type: str
    default: Any
    help: str


def _default_of(f: Any) -> Any:
    if f.default is not MISSING:
        return f.default
    return f.default_factory()


def config_keys(schema: type, prefix: str = "") -> list[ConfigKey]:
    """Every leaf key of ``schema``, in declaration order, with type, default and help."""
    keys: list[ConfigKey] = []
    hints = get_type_hints(schema)
    for f in fields(schema):
        tp = hints[f.name]
        dotted = f"{prefix}{f.name}"
        if is_dataclass(tp):
            keys += config_keys(typing.cast(type, tp), f"{dotted}.")
        else:
            default = config_to_dict({"value": _default_of(f)})["value"]
            help = f.metadata.get("help") or f"See {schema.__module__}.{schema.__qualname__}."
            keys.append(ConfigKey(dotted, _short_type(tp), default, help))
    return keys


def _short_type(tp: Any) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return "any"
    if origin is Literal:
        return " \\| ".join(str(a) for a in args)
    if origin in (Union, types.UnionType):
        return " \\| ".join("null" if a is type(None) else _short_type(a) for a in args)
    if origin is list:
        return f"list[{_short_type(args[0])}]"
    if origin is tuple:
        return f"[{', '.join(_short_type(a) for a in args)}]"
    if origin is dict:
        return f"dict[{_short_type(args[0])}, {_short_type(args[1])}]"
    return getattr(tp, "__name__", str(tp))


def _yaml_scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return text.removesuffix("...").strip()


def markdown_reference(schema: type) -> str:
    """The Markdown table of every key of ``schema`` (generated into docs/training.md)."""
    rows = ["| Key | Type | Default | Meaning |", "|---|---|---|---|"]
    for key in config_keys(schema):
        meaning = key.help.replace("|", "\\|")
        rows.append(f"| `{key.key}` | {key.type} | `{_yaml_scalar(key.default)}` | {meaning} |")
    return "\n".join(rows) + "\n"
