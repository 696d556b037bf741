"""Errors of the media path: bad source files, and cache entries that cannot be used."""

from __future__ import annotations

from videorl.errors import ConfigError, DataError, VideorlError


class MediaError(DataError):
    """A media file is missing, empty, truncated, or not a decodable video/image (names the file)."""


class CacheError(VideorlError):
    """A cache entry cannot be used (base class)."""


class CacheMissError(CacheError, LookupError):
    """No entry for this source and these parameters, and the source mode forbids decoding."""


class CorruptEntryError(CacheError):
    """An entry is truncated, corrupted, or does not match its own metadata."""


class ParamsMismatchError(CacheError, ConfigError):
    """The cache holds this source only for other decoding parameters (the message names them)."""


class SourceChangedError(CacheError):
    """The source video changed since its entries were built."""
