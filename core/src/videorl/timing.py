"""Wall time per stage of a step."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


class StageTimer:
    """Wall time per stage of a step (``time/<stage>`` metrics); ``show`` (e.g. the progress bar's
    :meth:`~videorl.runs.records.ProgressBar.stage`) is told what the step is doing as it goes, so a
    long step shows progress inside it."""

    def __init__(self, show: Callable[[str], None] | None = None) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.show: Callable[[str], None] = show or (lambda _: None)

    @contextmanager
    def __call__(self, stage: str, detail: str = "") -> Iterator[None]:
        self.show(f"{stage} {detail}".strip())
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] += time.perf_counter() - start
