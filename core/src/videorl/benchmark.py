"""The benchmark-adapter interface: load official files, prompt, extract, score, aggregate."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@dataclass
class BenchmarkRow:
    """One question of a benchmark, read from its official files."""

    id: str
    problem: str
    answer: Any
    problem_type: str = "multiple_choice"
    video: str | None = None  # path of the media file (absolute, or relative to the data root)
    options: list[str] | None = None
    categories: dict[str, str] = field(default_factory=dict)  # e.g. {"task": ..., "duration": ...}
    clip: tuple[float, float] | None = None  # start and end second when only a clip is asked about
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Benchmark(Protocol):
    """A benchmark adapter (registered with ``register_benchmarks``)."""

    name: str

    def load(self, data_root: Path) -> list[BenchmarkRow]:
        """Rows from the official files under ``data_root``; a malformed row raises ``DataError``."""
        ...

    def build_prompt(self, row: BenchmarkRow, *, family: str | None, thinking: bool) -> str:
        """The question text given to the model for ``row``."""
        ...

    def extract(self, row: BenchmarkRow, response: str) -> Any:
        """The answer in ``response`` (``None`` when there is none)."""
        ...

    def score(self, row: BenchmarkRow, prediction: Any) -> float:
        """The official per-row score of ``prediction``."""
        ...

    def aggregate(self, rows: list[BenchmarkRow], scores: list[float]) -> dict[str, Any]:
        """The official summary: ``{"overall": float, "categories": {name: {value: float}}}``."""
        ...
