"""Loading a schema from YAML: ``key=value`` overrides, every problem reported at once, and dumping back.

``load(schema, path, overrides)`` reads a YAML file, applies ``key=value`` overrides (dotted keys,
values parsed as YAML scalars: ``algorithm.clip_high=0.3``, ``data.train_files=[a.jsonl,b.jsonl]``)
and checks every key and type against the dataclasses. Every problem found (an unknown key, a wrong
type, a value out of range) is reported at once in one :class:`~videorl.errors.ConfigError` that
names the full key, where it was set (``file:line`` or the override) and, for unknown keys, the
closest valid keys. ``dump_config`` writes the resolved configuration back as YAML (saved with every
run).

The loader knows no schema. What a schema may declare (:mod:`videorl.option`), in the order used:

- per field, ``option(..., convert=f)``: ``f(value, key)`` rewrites a shorthand into the annotated type
  before the type check (the rewards section's routes);
- ``path_keys`` (class attribute of the root): dotted keys holding paths, made absolute against the
  config file's folder when written there (and against the working directory when dumped), and
  ``names_a_file(key, value, base)`` (static method of the root), whether a value is a path at all
  (``trainer.resume: auto`` is not);
- per section, ``_problems()``: range and cross-key checks, run once every value is well typed;
- per section, ``_after_load()``: run last, on a valid config (resolving a Hub id to its snapshot).
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from videorl.errors import ConfigError

T = TypeVar("T")

#: The words YAML 1.1 (PyYAML) reads as booleans, so a Literal option named ``off`` still matches.
_YAML_BOOL_WORDS = {True: {"on", "yes", "true"}, False: {"off", "no", "false"}}

# --- YAML -------------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-6`` as a float (YAML 1.1 wants ``1.0e-6``)."""


_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


class ParsedYaml(NamedTuple):
    """A YAML document as :func:`parse_yaml` reads it."""

    data: Any
    lines: dict[tuple[str, ...], int]  # (key, subkey, ...) -> the 1-based line it is set on
    duplicates: list[str]  # "file:line: duplicate key 'a.b' (first set on line N)", one per repeat


#: the most values that aliases (``*name``) may add to a document by repeating an anchored one
MAX_ALIASED_VALUES = 100_000


def _expanded_size(root: yaml.Node, where: str) -> None:
    """Refuse a document whose aliases repeat more than :data:`MAX_ALIASED_VALUES` values (an alias
    bomb: a few lines that expand to billions). Each node is sized once (memo by identity), so the
    check is linear in the document, whatever the aliases."""
    sizes: dict[int, int] = {}
    distinct = 0
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:  # post-order, without recursion: a node's size once its children's are known
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else (
            node.value if isinstance(node, yaml.SequenceNode) else [])  # fmt: skip
        if not children_done:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        distinct += 1
        sizes[id(node)] = 1 + sum(sizes[id(child)] for child in children)
        if sizes[id(node)] - distinct > MAX_ALIASED_VALUES:
            line = node.start_mark.line + 1
            raise ConfigError(
                f"{where}:{line}: its aliases (*name) repeat more than {MAX_ALIASED_VALUES:,} values; "
                "write the repeated parts out, or nest fewer aliases"
            )


def _load_yaml(text: str, where: str) -> tuple[yaml.Node | None, Any]:
    """The composed and the constructed document (safe YAML), after :func:`_expanded_size`."""
    loader = _Loader(text)  # a SafeLoader
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        _expanded_size(node, where)
        return node, loader.construct_document(node)
    finally:
        loader.dispose()


def parse_yaml(text: str, where: str) -> ParsedYaml:
    """Parse ``text`` (safe YAML, ``1e-5`` read as a float) read from ``where``: the document, the line of
    every mapping key and the keys set twice (PyYAML keeps the last silently); invalid YAML, or aliases
    that repeat too much, is a ``ConfigError`` naming ``where`` and the line."""
    try:
        node, data = _load_yaml(text, where)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{where}{line}: invalid YAML: {problem}") from exc
    except RecursionError:
        raise ConfigError(f"{where}: invalid YAML: nested too deeply") from None
    lines: dict[tuple[str, ...], int] = {}
    duplicates: list[str] = []
    walked: set[int] = set()  # an aliased mapping is walked once: its keys have the lines of its anchor

    def walk(n: yaml.Node | None, path: tuple[str, ...]) -> None:
        if not isinstance(n, yaml.MappingNode) or id(n) in walked:
            return
        walked.add(id(n))
        seen: dict[str, int] = {}
        for key_node, value_node in n.value:
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in seen:
                dotted = ".".join((*path, key))
                duplicates.append(f"{where}:{line}: duplicate key {dotted!r} (first set on line {seen[key]})")
            seen[key] = line
            lines[(*path, key)] = line
            walk(value_node, (*path, key))

    walk(node, ())
    return ParsedYaml(data, lines, duplicates)


# --- building and checking ----------------------------------------------------------------------


class _Mismatch(Exception):
    """A value that does not fit its type; ``path``/``value`` are set when it is inside a container."""

    def __init__(self, expected: str, path: tuple[str, ...] | None = None, value: Any = None) -> None:
        super().__init__(expected)
        self.expected = expected
        self.path = path
        self.value = value


@dataclass
class _Context:
    schema: type
    origins: dict[tuple[str, ...], str] = field(default_factory=dict)  # key -> "file:line" / override
    raw_text: dict[tuple[str, ...], str] = field(default_factory=dict)  # key -> override value text
    problems: list[str] = field(default_factory=list)

    def where(self, path: tuple[str, ...]) -> str | None:
        path = tuple(part.split("[", 1)[0] for part in path)  # list items: the line of their key
        for i in range(len(path), 0, -1):
            if path[:i] in self.origins:
                return self.origins[path[:i]]
        return None

    def problem(self, path: tuple[str, ...], message: str) -> None:
        where = self.where(path)
        self.problems.append(f"{where}: {message}" if where else message)


def _dotted(path: Sequence[str]) -> str:
    return ".".join(path)


def _type_name(tp: Any) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return "any value"
    if is_dataclass(tp):
        return "a section (mapping of keys)"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        names = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" or null" if type(None) in args else "")
    if origin is list:
        return f"a list of {_type_name(args[0])}"
    if origin is tuple:
        return f"a list of {len(args)} values ({', '.join(_type_name(a) for a in args)})"
    if origin is dict:
        return f"a mapping of {_type_name(args[0])} to {_type_name(args[1])}"
    return getattr(tp, "__name__", str(tp))


def _convert(value: Any, tp: Any, path: tuple[str, ...], ctx: _Context) -> Any:
    """``value`` checked (and, for int->float, converted) against ``tp``; raises ``_Mismatch``."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return value
    if isinstance(tp, type) and is_dataclass(tp):
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise _Mismatch(_type_name(tp))
        return _build(tp, value, path, ctx)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, path, ctx)
            except _Mismatch as exc:
                if exc.path is not None:  # the error is inside a container: report it there
                    raise
        raise _Mismatch(_type_name(tp))
    if origin is Literal:
        if value in args and type(value) in {type(a) for a in args}:
            return value
        if isinstance(value, bool):  # YAML 1.1 reads an unquoted off/no as false and on/yes as true
            words = [a for a in args if isinstance(a, str) and a.lower() in _YAML_BOOL_WORDS[value]]
            if len(words) == 1:
                return words[0]
        close = difflib.get_close_matches(str(value), [str(a) for a in args], n=1)
        raise _Mismatch(_type_name(tp) + (f" (did you mean {close[0]!r}?)" if close else ""))
    if origin is list or origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise _Mismatch(_type_name(tp))
        if origin is tuple and len(value) != len(args):
            raise _Mismatch(_type_name(tp))
        element_types = args if origin is tuple else [args[0]] * len(value)
        out = []
        for i, (item, item_tp) in enumerate(zip(value, element_types, strict=True)):
            item_path = (*path[:-1], f"{path[-1]}[{i}]")
            try:
                out.append(_convert(item, item_tp, item_path, ctx))
            except _Mismatch as exc:
                raise (exc if exc.path else _Mismatch(exc.expected, item_path, item)) from None
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(value, Mapping):
            raise _Mismatch(_type_name(tp))
        result = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Mismatch(_type_name(tp))
            try:
                result[key] = _convert(item, args[1], (*path, key), ctx)
            except _Mismatch as exc:
                raise (exc if exc.path else _Mismatch(exc.expected, (*path, key), item)) from None
        return result
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
        if path in ctx.raw_text and isinstance(value, (int, float, bool)):
            return ctx.raw_text[path]  # an override's text: `model.path=2024` means the string
    else:  # pragma: no cover - a schema author used a type this loader does not know
        raise TypeError(f"config key {_dotted(path)!r}: unsupported annotation {tp!r}")
    raise _Mismatch(_type_name(tp))


def _all_keys(schema: type, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    keys: list[tuple[str, ...]] = []
    hints = get_type_hints(schema)
    for f in fields(schema):
        keys.append((*prefix, f.name))
        if is_dataclass(hints[f.name]):
            keys += _all_keys(hints[f.name], (*prefix, f.name))
    return keys


def _suggest(path: tuple[str, ...], siblings: list[str], ctx: _Context) -> str:
    """' Did you mean ...?' for an unknown key: close siblings, then the same name in other sections."""
    name = path[-1]
    prefix = path[:-1]
    candidates = [_dotted((*prefix, s)) for s in difflib.get_close_matches(name, siblings, n=3, cutoff=0.6)]
    everywhere = _all_keys(ctx.schema)
    leaves = sorted({k[-1] for k in everywhere})
    for leaf in difflib.get_close_matches(name, leaves, n=3, cutoff=0.75):
        for key in everywhere:
            if key[-1] == leaf and _dotted(key) not in candidates and key[:-1] != prefix:
                candidates.append(_dotted(key))
    if not candidates:
        section = f" of section {_dotted(prefix)!r}" if prefix else ""
        return f" Valid keys{section}: {', '.join(siblings)}."
    return " Did you mean " + " or ".join(repr(c) for c in candidates[:3]) + "?"


def _build(schema: type[T], raw: Mapping[Any, Any], path: tuple[str, ...], ctx: _Context) -> T:
    """An instance of ``schema`` from ``raw``; problems go to ``ctx`` (defaults stand in meanwhile).

    A field's converter (``option(convert=...)``) rewrites its shorthand forms first; a
    ``ConfigError`` it raises, or one the section raises when constructed, is reported at the key's
    (or the section's) location.
    """
    hints = get_type_hints(schema)
    declared = {f.name: f for f in fields(schema) if f.init}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        key_path = (*path, str(key))
        if key not in declared:
            ctx.problem(
                key_path, f"unknown key {_dotted(key_path)!r}.{_suggest(key_path, list(declared), ctx)}"
            )
            continue
        convert = declared[key].metadata.get("convert")
        try:
            if convert is not None:
                value = convert(value, _dotted(key_path))
            kwargs[key] = _convert(value, hints[key], key_path, ctx)
        except ConfigError as exc:
            ctx.problem(key_path, str(exc))
        except _Mismatch as exc:
            where, got = (exc.path, exc.value) if exc.path else (key_path, value)
            ctx.problem(where, f"{_dotted(where)} must be {exc.expected}, got {got!r}")
    try:
        return schema(**kwargs)
    except ConfigError as exc:
        ctx.problem(path, str(exc))
        return schema()


def _sections(obj: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every section of ``obj`` (itself included) with its key, children first."""
    found = [
        section
        for f in fields(obj)
        if is_dataclass(child := getattr(obj, f.name))
        for section in _sections(child, (*path, f.name))
    ]
    return [*found, (path, obj)]


def _check(obj: Any, ctx: _Context) -> None:
    """Run every section's ``_problems`` (value ranges, cross-key rules), children first."""
    for path, section in _sections(obj):
        check = getattr(section, "_problems", None)
        if check is not None:
            for key, message in check():
                key_path = (*path, *key.split("."))
                ctx.problem(key_path, f"{_dotted(key_path)} {message}")


def _apply_override(raw: dict[str, Any], text: str, ctx: _Context) -> None:
    key, sep, value_text = text.partition("=")
    key = key.strip()
    where = f"override {text!r}"
    parts = tuple(key.split("."))
    if not sep or not key or not all(parts):
        ctx.problems.append(f"{where}: an override must look like key=value, e.g. algorithm.clip_high=0.3")
        return
    try:
        _, value = _load_yaml(value_text, where)
    except yaml.YAMLError as exc:
        ctx.problems.append(f"{where}: the value is not valid YAML ({getattr(exc, 'problem', exc)})")
        return
    except (ConfigError, RecursionError) as exc:
        ctx.problems.append(f"{where}: the value is refused ({exc or 'nested too deeply'})")
        return
    schema: Any = ctx.schema
    for i, part in enumerate(parts[:-1]):  # a key of a known scalar cannot hold sub-keys
        hints = get_type_hints(schema) if is_dataclass(schema) else {}
        schema = hints.get(part)
        if schema is None or not is_dataclass(schema):
            if schema is not None and get_origin(schema) is not dict and schema is not Any:
                ctx.problems.append(
                    f"{where}: {_dotted(parts[: i + 1])} is not a section, it cannot hold {key!r}"
                )
                return
            break
    section: dict[str, Any] = raw
    for i, part in enumerate(parts[:-1]):
        child = section.get(part)
        if child is None:
            child = section[part] = {}
        if not isinstance(child, dict):
            ctx.problems.append(
                f"{where}: {_dotted(parts[: i + 1])} is not a section, it cannot hold {key!r}"
            )
            return
        section = child
    section[parts[-1]] = value
    for i in range(1, len(parts) + 1):
        if i == len(parts) or parts[:i] not in ctx.origins:
            ctx.origins[parts[:i]] = where
    ctx.raw_text[parts] = value_text.strip()


def _map_paths(raw: dict[str, Any], schema: type, base: Path, change: Callable[[str], str]) -> None:
    """Replace, in place, every path value of ``schema.path_keys`` in ``raw`` by ``change(path)``.

    ``a.b[].c`` names the ``c`` of every item of the list ``a.b`` (``trainer.benchmarks[].data_root``).
    """
    keys: Sequence[str] = getattr(schema, "path_keys", ())
    names_a_file: Callable[[str, str, Path], bool] = getattr(schema, "names_a_file", lambda *_: True)

    def is_path(key: str, value: Any) -> bool:
        return isinstance(value, str) and bool(value) and names_a_file(key, value, base)

    for key in keys:
        *sections, name = key.split(".")
        nodes: list[Any] = [raw]
        for section in sections:
            items = section.endswith("[]")
            found = [n.get(section.removesuffix("[]")) for n in nodes if isinstance(n, dict)]
            nodes = [i for f in found if isinstance(f, list) for i in f] if items else found
        for node in nodes:
            if not isinstance(node, dict) or node.get(name) is None:
                continue
            value = node[name]
            if is_path(key, value):
                node[name] = change(value)
            elif isinstance(value, list):
                node[name] = [change(v) if is_path(key, v) else v for v in value]


def _against(base: Path) -> Callable[[str], str]:
    def resolve(value: str) -> str:
        return os.path.normpath(os.path.join(base, os.path.expanduser(value)))

    return resolve


def load(
    schema: type[T],
    path: str | Path | None = None,
    overrides: Sequence[str] = (),
    *,
    data: Mapping[str, Any] | None = None,
) -> T:
    """A ``schema`` instance from a YAML file, or from ``data`` (what :func:`config_to_dict` returns, e.g.
    sent to another process), or the defaults, with ``key=value`` overrides applied.

    Raises :class:`ConfigError` listing every unknown key, wrong type and out-of-range value, each
    with its full key and where it was set.
    """
    ctx = _Context(schema)
    raw: dict[str, Any] = copy.deepcopy(dict(data)) if data is not None else {}
    if path is not None:
        where = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {where}: {exc.strerror or exc}") from exc
        data, lines, duplicates = parse_yaml(text, where)
        ctx.problems += duplicates
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: the config must be a mapping of keys, got {type(data).__name__}")
        raw = data
        ctx.origins.update({key: f"{where}:{line}" for key, line in lines.items()})
        base = Path(path).absolute().parent
        _map_paths(raw, schema, base, _against(base))
    for text in overrides:
        _apply_override(raw, text, ctx)
    config = _build(schema, raw, (), ctx)
    if not ctx.problems:  # range checks only make sense on well-typed values
        _check(config, ctx)
    if ctx.problems:
        header = f"invalid configuration{f' in {path}' if path is not None else ''}:"
        raise ConfigError("\n  ".join([header, *ctx.problems]))
    for _, section in _sections(config):
        after_load = getattr(section, "_after_load", None)
        if after_load is not None:
            after_load()
    return config


# --- dumping and documenting --------------------------------------------------------------------


def config_to_dict(config: Any) -> dict[str, Any]:
    """Plain dicts, lists and scalars (tuples become lists), ready for YAML or JSON."""

    def plain(value: Any) -> Any:
        if is_dataclass(value) and not isinstance(value, type):
            return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    result: dict[str, Any] = plain(config)
    return result


def dump_config(config: Any, run_dir: str | Path | None = None) -> str:
    """The resolved configuration as YAML; ``load_config`` reads it back to an equal object, with its
    relative paths made absolute (against the working directory), from whichever folder it is saved in.

    With ``run_dir`` (the file is saved there: a run's ``config.yaml``), the paths inside ``run_dir``
    are written relative to it (``output_dir: .``), so that the file stays valid, and names the
    run's own folder, when the run directory is moved or resumed on another machine.
    """
    data = config_to_dict(config)
    run = None if run_dir is None else Path(os.path.abspath(run_dir))

    def portable(value: str) -> str:
        absolute = Path(os.path.abspath(os.path.expanduser(value)))
        if run is not None and absolute.is_relative_to(run):
            return os.path.relpath(absolute, run)
        return str(absolute)

    _map_paths(data, type(config), Path.cwd(), portable)
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
