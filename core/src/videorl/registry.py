"""One registry per kind of component (rewards, benchmarks, model backends, ...).

Plugins fill registries through the ``register`` callback handed to their ``register_*`` hooks. A
registry knows which distribution registered each name, refuses a name registered twice (naming
both distributions), suggests close names for an unknown one, and imports lazy ``"module:attr"``
targets only on first use.
"""

from __future__ import annotations

import difflib
import importlib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from videorl.errors import ComponentImportError, DuplicateComponentError, UnknownComponentError

T = TypeVar("T")

_LAZY_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def normalize_name(name: str) -> str:
    """The lookup form of a name: case-folded, runs of spaces/hyphens/underscores as one ``_``."""
    return re.sub(r"[\s_\-]+", "_", name.strip().casefold())


class Register(Protocol):
    """The callback a ``register_*`` hook receives."""

    def __call__(
        self, name: str, target: Any, *, aliases: Sequence[str] = (), description: str = ""
    ) -> None: ...


@dataclass
class Entry:
    """A registered component: its name, target, the distribution that registered it, aliases."""

    name: str
    target: Any
    origin: str
    aliases: tuple[str, ...] = ()
    description: str = ""
    _loaded: Any = field(default=None, repr=False)

    @property
    def is_lazy(self) -> bool:
        return isinstance(self.target, str)

    def load(self, kind: str) -> Any:
        """The target, importing it first when it was registered as ``"module:attr"``."""
        if not self.is_lazy:
            return self.target
        if self._loaded is None:
            module_name, _, attr = self.target.partition(":")
            try:
                obj: Any = importlib.import_module(module_name)
                for part in attr.split("."):
                    obj = getattr(obj, part)
            except Exception as exc:
                raise ComponentImportError(
                    f"{kind} {self.name!r} from distribution {self.origin!r} could not be imported "
                    f"({self.target}): {type(exc).__name__}: {exc}. Reinstall or upgrade "
                    f"{self.origin!r}, or disable it with VIDEORL_DISABLE_PLUGINS={self.origin}."
                ) from exc
            self._loaded = obj
        return self._loaded


class Registry(Generic[T]):
    """Named components of one kind, with their origins."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = {}
        self._keys: dict[str, str] = {}  # normalised name or alias -> canonical name
        self.failed_plugins: dict[str, str] = {}  # distribution -> error, mentioned on unknown names
        self._conflicts: dict[str, str] = {}  # normalised name -> collision message, raised on use

    def register(
        self,
        name: str,
        target: Any,
        *,
        origin: str,
        aliases: Sequence[str] = (),
        description: str = "",
    ) -> None:
        """Add a component; a name or alias already taken is a :class:`DuplicateComponentError`."""
        if not isinstance(name, str) or not name.strip():
            raise TypeError(f"{origin}: a {self.kind} name must be a non-empty string, got {name!r}")
        if isinstance(aliases, str) or not all(isinstance(a, str) and a.strip() for a in aliases):
            raise TypeError(f"{origin}: aliases of {self.kind} {name!r} must be a sequence of strings")
        if isinstance(target, str):
            if not _LAZY_TARGET.match(target):
                raise TypeError(
                    f"{origin}: {self.kind} {name!r} has target {target!r}; a string target must "
                    "look like 'package.module:attribute'"
                )
        elif not callable(target):
            raise TypeError(
                f"{origin}: {self.kind} {name!r} has target {target!r}; it must be a class, a "
                "factory or a 'module:attribute' string"
            )
        entry = Entry(name, target, origin, tuple(aliases), description)
        keys = {normalize_name(k) for k in (name, *aliases)}
        for key in keys:
            if key in self._keys:
                other = self._entries[self._keys[key]]
                message = (
                    f"{self.kind} {key!r} is registered twice: by distribution {other.origin!r} "
                    f"(as {other.name!r}) and by distribution {origin!r} (as {name!r}). Uninstall "
                    f"or disable one of them (VIDEORL_DISABLE_PLUGINS=...)."
                )
                self._conflicts[key] = message
                raise DuplicateComponentError(message)
        self._entries[name] = entry
        for key in keys:
            self._keys[key] = name

    def registrar(self, origin: str) -> Register:
        """The ``register`` callback handed to one plugin's hook."""

        def register(
            name: str, target: Any, *, aliases: Sequence[str] = (), description: str = ""
        ) -> None:
            self.register(name, target, origin=origin, aliases=aliases, description=description)

        return register

    def canonical(self, name: str) -> str:
        """The registered name for ``name`` or one of its aliases; unknown names raise with suggestions."""
        key = normalize_name(name)
        if key in self._conflicts:
            raise DuplicateComponentError(self._conflicts[key])
        if key in self._keys:
            return self._keys[key]
        message = f"unknown {self.kind} {name!r}."
        close = difflib.get_close_matches(key, list(self._keys), n=3, cutoff=0.6)
        if close:
            message += " Did you mean " + " or ".join(repr(self._keys[c]) for c in close) + "?"
        message += f" Registered: {', '.join(sorted(self._entries)) or '(none)'}."
        if self.failed_plugins:
            failed = "; ".join(f"{dist}: {err}" for dist, err in sorted(self.failed_plugins.items()))
            message += f" Plugins that failed to load and may provide it: {failed}."
        raise UnknownComponentError(message)

    def entry(self, name: str) -> Entry:
        return self._entries[self.canonical(name)]

    def get(self, name: str) -> T:
        """The component's target (class or factory), imported on first use."""
        entry = self.entry(name)
        loaded: T = entry.load(self.kind)
        return loaded

    def create(self, name: str, **options: Any) -> Any:
        """Call the component's factory with ``options`` and return the instance."""
        factory: Callable[..., Any] = self.get(name)  # type: ignore[assignment]
        return factory(**options)

    def remove_origin(self, origin: str) -> None:
        """Forget every component a distribution registered (used when its hook fails half-way)."""
        for name in self.by_origin(origin):
            del self._entries[name]
        self._keys = {k: n for k, n in self._keys.items() if n in self._entries}

    def names(self) -> list[str]:
        return sorted(self._entries)

    def entries(self) -> list[Entry]:
        return [self._entries[n] for n in self.names()]

    def by_origin(self, origin: str) -> list[str]:
        return [e.name for e in self.entries() if e.origin == origin]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and normalize_name(name) in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)
