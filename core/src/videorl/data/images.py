"""Images given in a row as bytes (the ``datasets`` ``Image`` feature), kept as content-addressed files.

``datasets`` stores an ``Image`` column as ``{"bytes": b"...", "path": "name.png"}`` structs (in
``save_to_disk`` shards and Hub Parquet exports); ``bytes`` is null when the image is a file that
``path`` names. Bytes are checked with Pillow, never unpickled: the header's size against
:data:`MAX_IMAGE_PIXELS` before a pixel is decoded (a decompression bomb is hostile input; images given
by path get the same check, :func:`check_image_file`, before they are decoded), then a full
decode, so a truncated or corrupt image is an error naming its row. A valid image is written once,
atomically, to ``<image dir>/<sha256[:2]>/<sha256><ext>`` and the sample names that file: every process
that reads the dataset (the driver, each Ray worker, ``cache build``) finds it by the same path, and
one whose file is already there only hashes the bytes (docs/data-path.md says why not in memory).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from videorl.atomic import atomic_write_bytes
from videorl.data.files import open_regular
from videorl.errors import DataError

#: most pixels of any image, given as bytes or by path, and of a video frame (Pillow's own warning
#: threshold: about 9459 × 9459)
MAX_IMAGE_PIXELS = 89_478_485
#: Pillow's format → the suffix the media decoder (FFmpeg) reads it by
_SUFFIXES = {"PNG": ".png", "JPEG": ".jpg", "WEBP": ".webp", "GIF": ".gif", "BMP": ".bmp", "TIFF": ".tiff"}


def default_image_dir() -> Path:
    """Where images given as bytes are written: ``$VIDEORL_IMAGE_DIR``, else
    ``$XDG_CACHE_HOME/videorl/images`` (``~/.cache/videorl/images``)."""
    if os.environ.get("VIDEORL_IMAGE_DIR"):
        return Path(os.environ["VIDEORL_IMAGE_DIR"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "videorl" / "images"


def _pillow(where: str) -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise DataError(f"{where}: reading an image needs Pillow: pip install 'videorl[data]'") from None
    return Image


def check_pixels(
    width: int, height: int, where: str, max_pixels: int = MAX_IMAGE_PIXELS, *, what: str = "the image"
) -> None:
    """The one pixel limit of every image (given as bytes or by path) and video frame: a ``DataError``
    starting with ``where`` when ``width × height`` is over ``max_pixels``."""
    if width * height > max_pixels:
        raise DataError(
            f"{where}: {what} is {width}×{height} ({width * height} pixels), over the limit of "
            f"{max_pixels}; resize it in the dataset"
        )


@contextmanager
def open_image(source: BinaryIO, where: str, max_pixels: int = MAX_IMAGE_PIXELS) -> Iterator[Any]:
    """The Pillow image in ``source`` with only its header read, its size checked against
    :func:`check_pixels` (decode it with ``.load()``); a ``DataError`` starting with ``where`` when it is
    too large, not an image, truncated or corrupt (also when raised by the body, e.g. by ``.load()``)."""
    Image = _pillow(where)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the size is checked below
            with Image.open(source) as image:
                width, height = image.size
                check_pixels(width, height, where, max_pixels)
                yield image
    except DataError:
        raise
    except Image.DecompressionBombError as exc:  # Pillow's own refusal, from the header, at twice its limit
        pixels = re.search(r"\((\d+) pixels\)", str(exc))
        size = f" ({pixels.group(1)} pixels)" if pixels else ""
        raise DataError(
            f"{where}: the image is larger{size} than the limit of {max_pixels} pixels; "
            "resize it in the dataset"
        ) from None
    except Image.UnidentifiedImageError:
        raise DataError(f"{where}: not an image (no format Pillow reads); fix or drop the row") from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise DataError(f"{where}: not a readable image ({exc}); fix or drop the row") from None


def check_image_file(path: str | os.PathLike[str], max_pixels: int = MAX_IMAGE_PIXELS) -> None:
    """Check, from its header, that the image file ``path`` (a regular file) is within the pixel limit,
    before anything decodes it."""
    with open_regular(path) as f, open_image(f, str(path), max_pixels):
        pass


def check_image(data: bytes, where: str, max_pixels: int = MAX_IMAGE_PIXELS) -> str:
    """The file suffix of the image ``data`` after a bounded full decode; a ``DataError`` starting with
    ``where`` when it is too large, not an image, truncated or corrupt."""
    with open_image(io.BytesIO(data), where, max_pixels) as image:
        kind = image.format or ""
        image.load()
    if kind not in _SUFFIXES:
        raise DataError(
            f"{where}: a {kind or 'unknown'} image; images given as bytes are read as "
            f"{', '.join(_SUFFIXES)} (convert it, e.g. to PNG)"
        )
    return _SUFFIXES[kind]


def store_image(data: bytes, where: str, directory: Path) -> str:
    """The absolute path of the content-addressed file holding the image ``data`` (checked and written
    when it is not there yet)."""
    digest = hashlib.sha256(data).hexdigest()
    folder = directory.expanduser().absolute() / digest[:2]
    for suffix in _SUFFIXES.values():
        if (folder / f"{digest}{suffix}").is_file():
            return str(folder / f"{digest}{suffix}")
    path = folder / f"{digest}{check_image(data, where)}"
    try:
        atomic_write_bytes(path, data)
    except OSError as exc:
        raise DataError(
            f"{where}: cannot write the image to {path} ({exc}); set VIDEORL_IMAGE_DIR to a writable folder"
        ) from None
    return str(path)
