"""One registry per kind of component (rewards, benchmarks, model backends, ...).

Plugins fill registries through the ``register`` callback handed to their ``register_*`` hooks. A
registry knows which distribution registered each name, suggests close names for an unknown one, and
imports lazy ``"module:attr"`` targets only on first use.

Collisions: when two components claim the same name or alias (normalised), *neither* wins, whatever
the load order: each colliding component fails on use with one error naming the key, both
components and both distributions; every other component, of both distributions, stays usable.
Built-ins get no precedence, so that a name always means the same code or stops the run.
"""

from __future__ import annotations

import contextlib
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
        self._all: list[Entry] = []  # in registration order; collisions are derived from it
        self._index: _Index | None = None
        self.failed_plugins: dict[str, str] = {}  # distribution -> error, mentioned on unknown names

    def register(
        self,
        name: str,
        target: Any,
        *,
        origin: str,
        aliases: Sequence[str] = (),
        description: str = "",
    ) -> None:
        """Add a component; a name or alias already taken is recorded as a collision (both components
        fail on use) and raised as a :class:`DuplicateComponentError`."""
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
        self._all.append(entry)
        self._index = None
        message = self._indexed().conflicts.get(id(entry))
        if message is not None:
            raise DuplicateComponentError(message)

    def registrar(self, origin: str) -> Register:
        """The ``register`` callback handed to one plugin's hook.

        A collision does not stop the hook: it is recorded (see :meth:`collisions`) and the plugin's
        other components still register.
        """

        def register(name: str, target: Any, *, aliases: Sequence[str] = (), description: str = "") -> None:
            with contextlib.suppress(DuplicateComponentError):
                self.register(name, target, origin=origin, aliases=aliases, description=description)

        return register

    def _indexed(self) -> _Index:
        if self._index is None:
            self._index = _Index(self.kind, self._all)
        return self._index

    def collisions(self) -> list[tuple[str, tuple[str, ...]]]:
        """Each collision's error message with the distributions involved, in registration order."""
        return self._indexed().collisions

    def canonical(self, name: str) -> str:
        """The registered name for ``name`` or one of its aliases; unknown names raise with suggestions,
        a colliding one raises :class:`DuplicateComponentError`."""
        index = self._indexed()
        key = normalize_name(name)
        if key in index.keys:
            entry = index.keys[key]
            if id(entry) in index.conflicts:
                raise DuplicateComponentError(index.conflicts[id(entry)])
            return entry.name
        message = f"unknown {self.kind} {name!r}."
        close = difflib.get_close_matches(key, list(index.keys), n=3, cutoff=0.6)
        if close:
            message += " Did you mean " + " or ".join(repr(index.keys[c].name) for c in close) + "?"
        message += f" Registered: {', '.join(self.names()) or '(none)'}."
        if self.failed_plugins:
            failed = "; ".join(f"{dist}: {err}" for dist, err in sorted(self.failed_plugins.items()))
            message += f" Plugins that failed to load and may provide it: {failed}."
        raise UnknownComponentError(message)

    def entry(self, name: str) -> Entry:
        self.canonical(name)
        return self._indexed().keys[normalize_name(name)]

    def get(self, name: str) -> T:
        """The component's target (class or factory), imported on first use."""
        entry = self.entry(name)
        loaded: T = entry.load(self.kind)
        return loaded

    def create(self, name: str, **options: Any) -> Any:
        """Call the component's factory with ``options`` and return the instance."""
        factory: Callable[..., Any] = self.get(name)  # type: ignore[assignment]
        return factory(**options)

    def conflict(self, entry: Entry) -> str | None:
        """The collision error of ``entry`` (``None`` when it is usable)."""
        return self._indexed().conflicts.get(id(entry))

    def remove_origin(self, origin: str) -> None:
        """Forget every component a distribution registered (used when its hook fails half-way)."""
        self._all = [e for e in self._all if e.origin != origin]
        self._index = None

    def names(self) -> list[str]:
        """Every registered name, colliding ones included (they raise on use)."""
        return sorted({e.name for e in self._all})

    def entries(self) -> list[Entry]:
        """Every registered component by name, colliding ones included (see :meth:`conflict`)."""
        return sorted(self._all, key=lambda e: e.name)

    def by_origin(self, origin: str) -> list[str]:
        return sorted({e.name for e in self._all if e.origin == origin})

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and normalize_name(name) in self._indexed().keys

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())


class _Index:
    """Lookup keys and collisions of a list of entries, independent of which collides first."""

    def __init__(self, kind: str, entries: Sequence[Entry]) -> None:
        claims: dict[str, list[Entry]] = {}
        for entry in entries:
            for key in dict.fromkeys(normalize_name(k) for k in (entry.name, *entry.aliases)):
                claims.setdefault(key, []).append(entry)
        self.keys: dict[str, Entry] = {key: claimants[0] for key, claimants in claims.items()}
        self.conflicts: dict[int, str] = {}  # id(entry) -> its collision error
        self.collisions: list[tuple[str, tuple[str, ...]]] = []
        for key, claimants in claims.items():
            if len(claimants) < 2:
                continue
            ordered = sorted(claimants, key=lambda e: (e.origin, e.name))  # the same text in any load order
            who = " and ".join(f"by distribution {e.origin!r} (as {e.name!r})" for e in ordered)
            origins = tuple(dict.fromkeys(e.origin for e in ordered))
            disable = " or ".join(f"VIDEORL_DISABLE_PLUGINS={o}" for o in origins)
            times, unused = ("twice", "Neither") if len(ordered) == 2 else (f"{len(ordered)} times", "None")
            message = (
                f"{kind} {key!r} is registered {times}: {who}. {unused} is used, whichever loads first; "
                f"uninstall or disable one of them ({disable}), or rename the component."
            )
            self.collisions.append((message, origins))
            for entry in claimants:
                self.conflicts.setdefault(id(entry), message)
