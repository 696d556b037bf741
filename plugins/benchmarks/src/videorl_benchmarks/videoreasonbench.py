"""VideoReasonBench: vision-centric reasoning over six puzzle families, open-ended answers.

Its official annotation format could not be pinned down: this adapter loads EasyVideoR1's unified
``videoreasonbench.json`` (``problem`` holds the full task instruction ending with "Provide a summary
of the final answer after 'Final Answer:'"; ``path`` = ``<family>/<video>.mp4`` under the data root;
``solution`` = ``<answer>multi-line text</answer>``). The answer is everything after the last "Final
Answer:". The official score is an LLM judge's 0/1 (EasyVideoR1's ``llm_judge.py``): put it in the
predictions as ``judge_score``; without it the rule-based match applies (normalised equality or the
truth contained in the answer), which undercounts. Reported by puzzle family (card, chip, cup,
file_sys, grid, hrd).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

from videorl.api import BenchmarkRow, answers
from videorl_benchmarks.base import BaseBenchmark
from videorl_benchmarks.files import Record
from videorl_benchmarks.prompts import THINK_LEAD

_FINAL = re.compile(r"final\s+answer\s*[:：]", re.I)


class VideoReasonBench(BaseBenchmark):
    name = "videoreasonbench"
    unified_file = "videoreasonbench.json"
    instructions: ClassVar[dict[str, str]] = {}
    thinking_instructions: ClassVar[dict[str, str]] = {"open_ended": THINK_LEAD}

    def adapt_unified(self, rec: Record, row: BenchmarkRow) -> BenchmarkRow:
        row.categories["family"] = Path(rec.text("path")).parts[0]
        return row

    def read_answer(self, row: BenchmarkRow, response: str) -> Any:
        matches = list(_FINAL.finditer(response))
        text = response[matches[-1].end() :] if matches else answers.answer_text(response)
        return text.strip() or None
