"""The ``plugins:`` key of a training config: plugin modules a run loads without packaging them.

Each entry is an import path (``my_pkg.rewards``, as ``videorl --plugin``) or a ``.py`` file (relative
to the config file's folder), imported as the module named after the file (``my_reward.py`` is module
``my_reward``, so its lazy targets read ``"my_reward:attr"``). The modules are loaded with the run's
other plugins before the config's rewards, routes and datasets are validated; one that fails to import
or to register is a :class:`ConfigError` (the user named it), never skipped. ``run.json`` records each
plugin without a distribution (``--plugin`` and ``plugins:`` modules) with its file and SHA-256.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from videorl.errors import ConfigError
from videorl.plugins import load_plugins

if TYPE_CHECKING:
    from videorl.plugins import Plugins

__all__ = ["import_plugin", "load_run_plugins", "plugin_records"]


def import_plugin(spec: str, base: Path) -> ModuleType:
    """The module ``spec`` names: a ``.py`` file (relative to ``base``) or an import path."""
    where = f"plugins: {spec}"
    try:
        if not spec.endswith(".py"):
            return importlib.import_module(spec)
        path = (base / spec).resolve()
        if not path.is_file():
            raise ConfigError(
                f"{where}: {path} does not exist (a .py path in a config file is relative to that file; in "
                "an override, to the working directory)"
            )
        name = path.stem
        loaded = sys.modules.get(name)
        if loaded is not None:
            if Path(getattr(loaded, "__file__", "") or "").resolve() == path:
                return loaded
            raise ConfigError(
                f"{where}: the module name {name!r} is already taken by "
                f"{getattr(loaded, '__file__', loaded)}; "
                "rename the file"
            )
        module_spec = importlib.util.spec_from_file_location(name, path)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # lazy "my_reward:attr" targets and pickling find it
        try:
            module_spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        return module
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(
            f"{where}: the plugin module could not be imported: {type(exc).__name__}: {exc}"
        ) from exc


def load_run_plugins(
    specs: Sequence[str],
    *,
    base: Path,
    disable: Sequence[str] = (),
    extra: Sequence[ModuleType | str] = (),
    strict: bool | None = None,
) -> Plugins:
    """Every plugin, as ``videorl`` loads them (``disable``, ``extra`` and ``strict`` are its global
    flags), plus the modules ``specs`` name."""

    modules = [import_plugin(spec, base) for spec in specs]
    plugins = load_plugins(disable=disable, extra=[*extra, *modules], strict=strict)
    for spec, module in zip(specs, modules, strict=True):
        info = plugins.infos.get(module.__name__)
        if info is not None and info.status == "failed":
            raise ConfigError(f"plugins: {spec}: the plugin failed to load: {info.error}")
        if info is not None and info.status == "disabled":
            raise ConfigError(
                f"plugins: {spec}: the plugin {module.__name__!r} is disabled (--disable-plugin)"
            )
    return plugins


def plugin_records(plugins: Plugins) -> list[dict[str, Any]]:
    """What ``run.json`` records of the plugins that no distribution installed: name, file, SHA-256."""
    records = []
    for info in plugins.infos.values():
        if info.builtin or info.version is not None or info.status == "disabled":
            continue
        file = getattr(sys.modules.get(info.module), "__file__", None)
        digest = (
            hashlib.sha256(Path(file).read_bytes()).hexdigest() if file and Path(file).is_file() else None
        )
        records.append({"name": info.name, "status": info.status, "file": file, "sha256": digest})
    return records
