"""The benchmark-adapter interface: load official files, prompt, extract, score, aggregate.

An adapter turns a benchmark's own files into :class:`BenchmarkRow` objects and knows the benchmark's
official protocol: how to ask (per model family, with or without thinking), how to read the answer
out of a response, how to score it and how to report the official categories. The evaluator (and
``videorl eval score``) drive it as::

    rows = bench.load(data_root)
    prompt = bench.build_prompt(row, family="qwen3_vl", thinking=False)
    prediction = bench.extract(row, response)          # JSON-serialisable, None when absent
    score = bench.score(row, prediction)                # in [0, 1]
    summary = bench.aggregate(rows, scores)             # official overall + categories

``problem_type`` values used by the first-party adapters: ``multiple_choice``, ``numerical``,
``regression``, ``open_ended``, ``yes_no``, ``counting``, ``temporal_grounding``,
``spatial_temporal_grounding``. An ``open_ended`` row may be scored by an external judge: a
prediction record carrying ``judge_score`` replaces the adapter's rule-based score for such rows
(see :mod:`videorl.eval.scoring`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@dataclass
class BenchmarkRow:
    """One question of a benchmark, read from its official files.

    - ``answer``: the ground truth in the form ``extract`` returns (an option letter, a number, a
      ``[start, end]`` span in seconds, a ``{"time": ..., "boxes": ...}`` dict, a text, ...);
    - ``video`` / ``image``: absolute paths (the adapter resolves them against the data root); the
      file need not exist at load time (a missing video is a failed sample at evaluation time). A
      directory stands for a folder of frames (MVBench's episodic reasoning); ``image`` is shown
      after the video (Video-MMMU Adaptation);
    - ``options``: the option texts without their letters (the letter is the position: A, B, ...);
    - ``categories``: the official reporting categories, ``{"duration": "short", ...}``; a list value
      puts the row in several categories of that kind (LVBench question types);
    - ``clip``: start and end second when only that clip of the video is asked about;
    - ``extra``: whatever else the adapter needs (subtitles, group ids, raw fields).
    """

    id: str
    problem: str
    answer: Any
    problem_type: str = "multiple_choice"
    video: str | None = None
    options: list[str] | None = None
    categories: dict[str, str | list[str]] = field(default_factory=dict)
    clip: tuple[float, float] | None = None
    image: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Benchmark(Protocol):
    """A benchmark adapter (registered with ``register_benchmarks``)."""

    name: str

    def load(self, data_root: Path) -> list[BenchmarkRow]:
        """Rows from the official files under ``data_root``, with unique ids.

        A missing directory or file and a malformed row raise :class:`videorl.errors.DataError`
        naming the file and line (or item) and what to do.
        """
        ...

    def build_prompt(self, row: BenchmarkRow, *, family: str | None, thinking: bool) -> str:
        """The user text given to the model for ``row`` (the media are passed separately).

        ``family`` is a model family (a model backend's name such as ``"qwen3_vl"``); ``None`` asks
        for the benchmark's official prompt. ``thinking`` asks for reasoning before the answer.
        """
        ...

    def extract(self, row: BenchmarkRow, response: str) -> Any:
        """The answer in ``response``, JSON-serialisable (``None`` when there is none)."""
        ...

    def score(self, row: BenchmarkRow, prediction: Any) -> float:
        """The official per-row score of ``prediction`` in [0, 1] (0 for ``None``)."""
        ...

    def aggregate(self, rows: list[BenchmarkRow], scores: list[float]) -> dict[str, Any]:
        """The official summary of per-row ``scores`` (aligned with ``rows``).

        Required keys: ``overall`` (a float in [0, 1]) and ``categories``
        (``{kind: {value: float}}``). Optional: ``metric`` (the name of the overall figure, e.g.
        ``"accuracy"``, ``"M-Avg"``, ``"mIoU"``) and ``metrics`` (further official figures,
        ``{name: float}``, e.g. ``{"R@0.5": 0.41}``).

        An adapter whose figures depend on what was read from each row, not only on its score (an
        official denominator of the rows its scorer could read, a second reading reported beside the
        official one), sets the class attribute ``aggregates_predictions = True`` and takes a third
        argument, ``predictions``: each row's extracted prediction (``None`` for a failed row), aligned
        with ``rows``, or ``None`` when the caller has none (then it reports what the scores alone give).
        The evaluator, ``eval score`` and ``eval compare`` (its intervals too) pass them
        (:func:`videorl.eval.scoring.aggregator`).

        Each figure's 95% interval follows from what the adapter declares it to be, in an optional
        class attribute ``proportions``: the figures that are the share of their rows scored 1 (each
        row scoring 0 or 1) — ``"overall"`` or a metric's name (over all rows), a category kind (each
        of its values over that value's rows), ``"categories"`` (every kind). These get the Wilson
        interval, every other figure (a macro average, a group score) the bootstrap of this aggregate.
        An adapter whose aggregate scores rows together names the ``row.extra`` field of the group in
        ``resample_group`` (whole groups are resampled). See :mod:`videorl.eval.stats`.
        """
        ...
