"""Charades-STA: temporal grounding of sentences in Charades videos; mIoU and R@{0.3, 0.5, 0.7}.

Official files: ``charades_sta_test.txt`` (lines ``<video> <start> <end>##<sentence>``), or lmms-lab's
release as downloaded, ``data/test-00000-of-00001.parquet`` (or ``charades_sta*.parquet``/``.jsonl``/
``.json``: ``video``, ``caption``, ``timestamp`` [start, end]); videos ``Charades_v1_480/<video>.mp4`` (or
directly under the data root). EasyVideoR1's ``charades_sta.json`` (its answer JSON sits inside ``<think>``)
is read when neither exists.

The answer is read from ``{"time": [s, e]}`` JSON or from text ("12.3 - 25.7 seconds", "from 0:12 to
0:25"); a reversed pair is swapped. Per-row score = temporal IoU; overall = mIoU; ``metrics`` hold R@θ,
the fraction of queries with IoU ≥ θ.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from videorl.api import BenchmarkRow, DataError, answers, benchmark_summary, mean
from videorl_benchmarks.base import BaseBenchmark
from videorl_benchmarks.files import read_records, resolve_media
from videorl_benchmarks.prompts import thinking_ending

THRESHOLDS = (0.3, 0.5, 0.7)
#: lmms-eval's prompt ("seonds" included)
PROMPT = (
    "Please find the visual event described by a sentence in the video, determining its starting and ending "
    "times. The format should be: 'The event happens in the start time - end time'. For example, The event "
    "'person turn a light on' happens in the 24.3 - 30.4 seonds. Now I will give you the textual sentence: "
    "{sentence}. Please return its start time and end time."
)
_LINE = re.compile(r"^(\S+)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)##(.+)$")


class CharadesSTA(BaseBenchmark):
    name = "charades-sta"
    metric = "mIoU"
    proportions = ()  # means of IoUs
    official_files = (
        "charades_sta_test.txt",
        "data/test-*.parquet",  # lmms-lab/charades_sta as downloaded
        "charades_sta*.parquet",
        "charades_sta*.jsonl",
        "charades_sta_*.json",
    )
    unified_file = "charades_sta.json"

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        entries: list[tuple[str, float, float, str, str]] = []
        if path.suffix == ".txt":
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                if not line.strip():
                    continue
                match = _LINE.match(line.strip())
                if not match:
                    raise DataError(
                        f"{path}:{number}: expected '<video> <start> <end>##<sentence>', got {line!r}"
                    )
                video, start, end, sentence = match.groups()
                entries.append((video, float(start), float(end), sentence, f"{path}:{number}"))
        else:
            for rec in read_records(path):
                span = answers.parse_interval(rec.items("timestamp"), sort=True)
                if span is None:
                    raise rec.error(f"field 'timestamp' {rec.get('timestamp')!r} is not [start, end]")
                video = Path(rec.text("video")).stem
                entries.append((video, span[0], span[1], rec.text("caption"), rec.where))
        rows = []
        counts: dict[str, int] = {}
        for video, start, end, sentence, where in entries:
            if not 0 <= start < end:
                raise DataError(f"{where}: span {start}-{end} is not an interval")
            counts[video] = counts.get(video, 0) + 1
            rows.append(
                BenchmarkRow(
                    id=f"{video}#{counts[video]}",
                    problem=sentence.strip(),
                    answer=[start, end],
                    problem_type="temporal_grounding",
                    video=resolve_media(root, [f"Charades_v1_480/{video}.mp4", f"{video}.mp4"]),
                )
            )
        return rows

    def official_prompt(self, row: BenchmarkRow, *, thinking: bool) -> str:
        prompt = PROMPT.format(sentence=row.problem)
        return f"{prompt}\n{thinking_ending(row.problem_type)}" if thinking else prompt

    def summarize(self, rows: list[BenchmarkRow], scores: list[float]) -> dict[str, Any]:
        metrics = {f"R@{t}": mean(float(s >= t) for s in scores) for t in THRESHOLDS}
        return benchmark_summary(mean(scores), {}, metric=self.metric, metrics=metrics)
