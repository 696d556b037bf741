"""ODV-Bench (MCG-NJU/ODV-Bench): multiple-choice questions on clips cut from longer videos.

Its official annotation format could not be pinned down (EasyVideoR1's file was too large to read):
this adapter loads EasyVideoR1's unified ``odvbench.json`` with ``odv_task`` and ``odv_subtask``; clips
(``{index}_{video}_s{start}_e{end}.mp4``, cut with EasyVideoR1's ``eval/preprocess/cilp.py``) under the
data root (EasyVideoR1: ``ODV-Bench/clips``). Metric: accuracy, by task and subtask.
"""

from __future__ import annotations

from typing import ClassVar

from videorl_benchmarks.base import BaseBenchmark


class ODVBench(BaseBenchmark):
    name = "odv-bench"
    unified_file = "odvbench.json"
    unified_categories: ClassVar[dict[str, str]] = {"odv_task": "task", "odv_subtask": "subtask"}
