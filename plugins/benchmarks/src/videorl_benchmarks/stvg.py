"""STVG (EasyVideoR1's "ST-Align-Benchmark"): spatio-temporal grounding.

Its official source could not be pinned down: this adapter loads EasyVideoR1's unified ``stvg.json``
(``solution`` = ``<answer>{"time": [s, e], "boxes": {"<second>": [x1, y1, x2, y2], ...}}</answer>``,
boxes in absolute pixels of the source video; videos ``<id>.mp4`` under the data root). The prompt is
EasyVideoR1's (for any family). Score: 0.5 · temporal IoU + 0.5 · mean box IoU over the seconds present
in both answer and truth (temporal IoU alone when the truth has no boxes). Qwen3-VL answers boxes on a
0–1000 grid by default while the truth is in pixels: that mismatch lowers the box term unless the model
is prompted for pixels.
"""

from __future__ import annotations

from videorl.api import BenchmarkRow
from videorl_benchmarks.base import BaseBenchmark
from videorl_benchmarks.prompts import QWEN3, evr1_question, family_prompt


class STVG(BaseBenchmark):
    name = "stvg"
    metric = "0.5 tIoU + 0.5 box IoU"
    proportions = ()  # means of IoUs
    unified_file = "stvg.json"

    def official_prompt(self, row: BenchmarkRow, *, thinking: bool) -> str:
        return family_prompt(
            QWEN3, evr1_question(row.problem, row.options), row.problem_type, thinking=thinking
        )
