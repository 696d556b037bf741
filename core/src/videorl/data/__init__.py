"""Datasets: rows in the EasyVideoR1 and Video-R1 schemas, or lists of videos, as validated samples."""

from videorl.data.loaders import LIST_EXTENSIONS, VIDEO_EXTENSIONS, load_samples, parse_row, read_rows
from videorl.data.sample import DATA_TYPES, Sample

__all__ = [
    "DATA_TYPES",
    "LIST_EXTENSIONS",
    "VIDEO_EXTENSIONS",
    "Sample",
    "load_samples",
    "parse_row",
    "read_rows",
]
