"""The exceptions videorl raises on purpose. Each message says what went wrong, where, and what to do."""

from __future__ import annotations


class VideorlError(Exception):
    """Base class of all errors raised by videorl on purpose."""


class ConfigError(VideorlError, ValueError):
    """A configuration key, value or file is invalid."""


class DataError(VideorlError, ValueError):
    """A dataset row, file or media reference is invalid (the message names the file and line)."""


class RegistryError(VideorlError, LookupError):
    """A component lookup or registration failed."""


class UnknownComponentError(RegistryError):
    """No component of that kind has that name."""


class DuplicateComponentError(RegistryError):
    """Two plugins registered the same component name."""


class ComponentImportError(RegistryError):
    """A lazily registered component could not be imported."""


class PluginLoadError(VideorlError):
    """A plugin could not be loaded (raised only in strict mode; otherwise it is reported)."""


class AlignmentError(VideorlError, ValueError):
    """Visual placeholder tokens and visual features of a sample disagree."""
