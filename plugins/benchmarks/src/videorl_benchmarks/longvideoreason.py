"""LongVideo-Reason (LongVILA-R1's evaluation set): multiple-choice reasoning over long videos.

Its official annotation format could not be pinned down: this adapter loads EasyVideoR1's unified
``longvideoreason.json`` (up to 8 options; questions cite time ranges inline; videos
``<youtube_id>.mp4`` under the data root, EasyVideoR1's ``longvila_videos``). Metric: accuracy.
"""

from __future__ import annotations

from videorl_benchmarks.base import BaseBenchmark


class LongVideoReason(BaseBenchmark):
    name = "longvideo-reason"
    unified_file = "longvideoreason.json"
