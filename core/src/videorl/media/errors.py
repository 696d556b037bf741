"""Errors of the media path: bad source files, and cache entries that cannot be used.

Every one is a ``VideorlError``; a bad file or entry is also a ``DataError``, and decoding parameters
that do not fit the cache a ``ConfigError`` (``videorl.errors``).
"""

from __future__ import annotations

from videorl.errors import ConfigError, DataError, VideorlError


class MediaError(DataError):
    """A media file is missing, empty, truncated, or not a decodable video/image (names the file)."""


class CacheError(VideorlError):
    """A cache entry cannot be used (base class)."""


class CacheMissError(CacheError, LookupError):
    """No entry for this source and these parameters, and the source mode forbids decoding."""


class CorruptEntryError(CacheError, DataError):
    """An entry is truncated, corrupted, or does not match its own metadata."""


class ParamsMismatchError(CacheError, ConfigError):
    """The cache holds this source only for other decoding parameters (the message names them)."""


class SourceChangedError(CacheError, DataError):
    """The source video changed since its entries were built."""
