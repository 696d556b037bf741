"""Plugin discovery: built-ins and the ``videorl`` entry-point group, into one registry per kind.

Used by the CLI and the composition layer only; the training loop receives plain objects.

A plugin that fails to import (also by raising ``SystemExit`` or ``KeyboardInterrupt``), implements a
hook that does not exist, or raises while registering is reported (``videorl plugins`` shows it as
failed with the error) and skipped, never fatal, unless ``strict`` is set. A disabled plugin
(``VIDEORL_DISABLE_PLUGINS=a,b`` or ``--disable-plugin``) is blocked before it is imported. Two
components claiming one name or alias both fail on use, with one error naming both distributions (see
:mod:`videorl.registry`); the rest of both plugins stays usable, and ``strict`` makes the collision
fatal at load.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata as md
import os
import signal
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from types import FrameType, ModuleType
from typing import Any, TypeVar

import pluggy

from videorl import hookspecs
from videorl.errors import PluginLoadError
from videorl.registry import Registry

ENTRY_POINT_GROUP = "videorl"
CORE_DISTRIBUTION = "videorl"
BUILTIN_PLUGINS: tuple[str, ...] = ("videorl.builtin",)
DISABLE_ENV = "VIDEORL_DISABLE_PLUGINS"
STRICT_ENV = "VIDEORL_STRICT_PLUGINS"
T = TypeVar("T")

#: registry kind -> the hook that fills it
KINDS: dict[str, str] = {
    "rewards": "register_rewards",
    "benchmarks": "register_benchmarks",
    "model_backends": "register_model_backends",
    "prompt_templates": "register_prompt_templates",
    "rollout_engines": "register_rollout_engines",
    "rollout_workflows": "register_rollout_workflows",
    "tools": "register_tools",
    "loggers": "register_loggers",
    "advantage_estimators": "register_advantage_estimators",
    "policy_losses": "register_policy_losses",
    "algorithm_presets": "register_algorithm_presets",
}

_SINGULAR = {
    "rewards": "reward",
    "benchmarks": "benchmark",
    "model_backends": "model backend",
    "prompt_templates": "prompt template",
    "rollout_engines": "rollout engine",
    "rollout_workflows": "rollout workflow",
    "tools": "tool",
    "loggers": "logger",
    "advantage_estimators": "advantage estimator",
    "policy_losses": "policy loss",
    "algorithm_presets": "algorithm preset",
}


@dataclass
class PluginInfo:
    """What ``videorl plugins --json`` reports for one plugin."""

    name: str
    version: str | None
    module: str
    status: str = "ok"  # ok | failed | disabled
    error: str | None = None
    hooks: list[str] = field(default_factory=list)
    components: dict[str, list[str]] = field(default_factory=dict)
    builtin: bool = False
    #: collisions this plugin is part of: its colliding components fail on use, the others work
    conflicts: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def disabled_from_env() -> set[str]:
    return {n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip()}


def _dist_version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def _format_exc(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


#: what plugin code may raise and still be one failed plugin: ``SystemExit`` and a ``KeyboardInterrupt``
#: that the plugin raises itself end no command (a real Ctrl-C still does: see :func:`_run_plugin`)
_PLUGIN_FAILURES = (Exception, SystemExit, KeyboardInterrupt)


@contextmanager
def _sigint_watch() -> Iterator[list[bool]]:
    """``[received]``: whether a real ``SIGINT`` came while the block ran (the handler in place is still
    called: it raises ``KeyboardInterrupt`` as usual). Only the main thread receives signals; with
    ``SIGINT`` ignored, or left to kill the process (``SIG_DFL``), there is nothing to tell apart."""
    received = [False]
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield received
        return

    def interrupted(signum: int, frame: FrameType | None) -> None:
        received[0] = True
        previous(signum, frame)

    signal.signal(signal.SIGINT, interrupted)
    try:
        yield received
    finally:
        signal.signal(signal.SIGINT, previous)


def _run_plugin(code: Callable[[], T]) -> tuple[T | None, BaseException | None]:
    """``(code(), None)``, or ``(None, what it raised)`` when plugin code failed: any exception,
    ``SystemExit``, or a ``KeyboardInterrupt`` that it raised itself; one from a real ``SIGINT`` goes on."""
    with _sigint_watch() as received:
        try:
            return code(), None
        except _PLUGIN_FAILURES as exc:
            if isinstance(exc, KeyboardInterrupt) and received[0]:
                raise
            return None, exc


class Plugins:
    """The loaded plugins: the pluggy manager, what each plugin is, and the filled registries."""

    def __init__(self, strict: bool = False) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.strict = strict
        self.infos: dict[str, PluginInfo] = {}
        self.registries: dict[str, Registry[Any]] = {k: Registry(_SINGULAR[k]) for k in KINDS}

    # -- registries ------------------------------------------------------------------------------

    @property
    def rewards(self) -> Registry[Any]:
        return self.registries["rewards"]

    @property
    def benchmarks(self) -> Registry[Any]:
        return self.registries["benchmarks"]

    @property
    def model_backends(self) -> Registry[Any]:
        return self.registries["model_backends"]

    @property
    def prompt_templates(self) -> Registry[Any]:
        return self.registries["prompt_templates"]

    @property
    def rollout_engines(self) -> Registry[Any]:
        return self.registries["rollout_engines"]

    @property
    def rollout_workflows(self) -> Registry[Any]:
        return self.registries["rollout_workflows"]

    @property
    def tools(self) -> Registry[Any]:
        return self.registries["tools"]

    @property
    def loggers(self) -> Registry[Any]:
        return self.registries["loggers"]

    # -- loading ---------------------------------------------------------------------------------

    def _fail(self, info: PluginInfo, exc: BaseException | str) -> None:
        info.status = "failed"
        info.error = exc if isinstance(exc, str) else _format_exc(exc)
        if self.strict or info.builtin:  # core's own components failing is a broken install, never skipped
            raise PluginLoadError(f"plugin {info.name!r} failed to load: {info.error}")

    def add(self, plugin: object, info: PluginInfo) -> None:
        """Register one plugin object; on any validation error record it as failed instead."""
        self.infos[info.name] = info
        if self.pm.has_plugin(info.name):
            other = self.infos.get(info.name)
            self._fail(info, f"the plugin name {info.name!r} is already used ({other and other.module})")
            return
        _, error = _run_plugin(lambda: self.pm.register(plugin, name=info.name))
        if error is not None:
            self._fail(info, error)
            return
        unknown = [c.name for c in self.pm.get_hookcallers(plugin) or [] if not c.has_spec()]
        if unknown:
            self.pm.unregister(plugin)
            hints = []
            for name in unknown:
                close = difflib.get_close_matches(name, hookspecs.__all__, n=1)
                hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            self._fail(info, f"implements hooks that videorl does not define: {', '.join(hints)}")
            return
        info.hooks = sorted(c.name for c in self.pm.get_hookcallers(plugin) or [])

    def block(self, name: str, module: str = "", version: str | None = None) -> None:
        self.pm.set_blocked(name)
        self.infos[name] = PluginInfo(name, version, module, status="disabled")

    def fill_registries(self) -> None:
        """Call every ``register_*`` hook once per plugin, so that each component knows its origin."""
        for kind, hook in KINDS.items():
            registry = self.registries[kind]
            for name, info in self.infos.items():
                if info.status != "ok" or hook not in info.hooks:
                    continue
                self._call_for(name, hook, register=registry.registrar(name))
        failed = {n: i.error or "" for n, i in self.infos.items() if i.status == "failed"}
        for kind, registry in self.registries.items():
            registry.failed_plugins = failed
            for name, info in self.infos.items():
                if info.status == "ok" and registry.by_origin(name):
                    info.components[kind] = registry.by_origin(name)
            for message, origins in registry.collisions():
                if self.strict:
                    raise PluginLoadError(message)
                for origin in origins:
                    self.infos[origin].conflicts.append(message)

    def call_register_commands(self, cli: Any) -> None:
        for name, info in self.infos.items():
            if info.status == "ok" and "register_commands" in info.hooks:
                self._call_for(name, "register_commands", cli=cli)

    def _call_for(self, name: str, hook: str, **kwargs: Any) -> None:
        plugin = self.pm.get_plugin(name)
        others = [p for p in self.pm.get_plugins() if p is not plugin]
        caller = self.pm.subset_hook_caller(hook, remove_plugins=others)
        _, error = _run_plugin(lambda: caller(**kwargs))
        if error is not None:
            for registry in self.registries.values():
                registry.remove_origin(name)
            self._fail(self.infos[name], error)

    # -- reporting -------------------------------------------------------------------------------

    def report(self, include_builtin: bool = True) -> list[PluginInfo]:
        return [i for i in self.infos.values() if include_builtin or not i.builtin]

    def requirements(self) -> list[str]:
        """``name==version`` for core and every installed plugin distribution (recorded by every run)."""
        lines = {f"{CORE_DISTRIBUTION}=={_dist_version(CORE_DISTRIBUTION)}"}
        for info in self.infos.values():
            if not info.builtin and info.version:
                lines.add(f"{info.name}=={info.version}")
        return sorted(lines)


def _entry_points() -> Iterable[md.EntryPoint]:
    return md.entry_points(group=ENTRY_POINT_GROUP)


def load_plugins(
    *,
    disable: Iterable[str] = (),
    extra: Sequence[ModuleType | str] = (),
    entry_points: bool = True,
    strict: bool | None = None,
) -> Plugins:
    """Discover and load everything; the single entry point of plugin discovery.

    ``disable`` adds to ``VIDEORL_DISABLE_PLUGINS``; ``extra`` are one-off plugin modules (objects or
    import paths, like ``--plugin``); ``entry_points=False`` loads the built-ins only (tests).
    """
    if strict is None:
        strict = os.environ.get(STRICT_ENV, "") not in ("", "0")
    plugins = Plugins(strict=strict)
    disabled = disabled_from_env() | set(disable)
    core_version = _dist_version(CORE_DISTRIBUTION)
    for module_name in BUILTIN_PLUGINS:
        module = importlib.import_module(module_name)
        info = PluginInfo(CORE_DISTRIBUTION, core_version, module_name, builtin=True)
        plugins.add(module, info)
    if entry_points:
        for ep in _entry_points():
            dist = ep.dist.name if ep.dist is not None else ep.name
            version = ep.dist.version if ep.dist is not None else None
            if ep.name in disabled or dist in disabled:
                plugins.block(ep.name, ep.value, version)
                continue
            info = PluginInfo(ep.name, version, ep.value)
            if ep.name in plugins.infos:
                plugins.infos[f"{ep.name} ({ep.value})"] = info
                plugins._fail(
                    info,
                    f"entry-point name {ep.name!r} is used by two plugins "
                    f"({plugins.infos[ep.name].module} and {ep.value}); entry-point names must be "
                    "the distribution name",
                )
                continue
            obj, error = _run_plugin(ep.load)
            if error is not None:
                plugins.infos[ep.name] = info
                plugins._fail(info, error)
                continue
            plugins.add(obj, info)
    for item in extra:
        module = importlib.import_module(item) if isinstance(item, str) else item
        name = module.__name__
        if name in disabled:
            plugins.block(name, name)
            continue
        plugins.add(module, PluginInfo(name, None, name))
    plugins.fill_registries()
    return plugins
