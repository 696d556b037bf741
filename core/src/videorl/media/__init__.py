"""The video data path: decode once (PyAV), sample, resize, cache as safetensors, load where used.

Importing this package does not import torch; :meth:`MediaCache.load` imports it when called.
"""

from videorl.media.build import BuildFailure, BuildReport, build_cache
from videorl.media.cache import (
    CACHE_FORMAT_VERSION,
    SOURCE_MODES,
    EntryInfo,
    MediaCache,
    MediaRef,
    SourceMode,
    cache_key,
    read_entry,
    read_header,
)
from videorl.media.decode import decode_image, decode_video
from videorl.media.errors import (
    CacheError,
    CacheMissError,
    CorruptEntryError,
    MediaError,
    ParamsMismatchError,
    SourceChangedError,
)
from videorl.media.fingerprint import SourceFingerprint, fingerprint
from videorl.media.metadata import ImageMetadata, VideoMetadata
from videorl.media.params import DecodeParams, ImageParams
from videorl.media.sampling import frames_in_range, nearest_frames, num_frames
from videorl.media.sizing import fit_to_budget

__all__ = [
    "CACHE_FORMAT_VERSION",
    "SOURCE_MODES",
    "BuildFailure",
    "BuildReport",
    "CacheError",
    "CacheMissError",
    "CorruptEntryError",
    "DecodeParams",
    "EntryInfo",
    "ImageMetadata",
    "ImageParams",
    "MediaCache",
    "MediaError",
    "MediaRef",
    "ParamsMismatchError",
    "SourceChangedError",
    "SourceFingerprint",
    "SourceMode",
    "VideoMetadata",
    "build_cache",
    "cache_key",
    "decode_image",
    "decode_video",
    "fingerprint",
    "fit_to_budget",
    "frames_in_range",
    "nearest_frames",
    "num_frames",
    "read_entry",
    "read_header",
]
