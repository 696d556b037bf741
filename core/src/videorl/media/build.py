"""Building the cache for many videos at once: worker processes, deduplication, timeouts, a report.

Two phases on the same kind of pool: fingerprint every distinct path (hashes are remembered, so a
re-run is quick), then decode each distinct content once. A video that is missing, corrupt, too slow
or crashes its worker becomes a :class:`BuildFailure`; the build goes on.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from videorl.media.cache import MediaCache, MediaRef
from videorl.media.params import DecodeParams
from videorl.workers import WorkerPool


@dataclass(frozen=True)
class BuildFailure:
    """A video that could not be cached, and why."""

    video: str
    reason: str
    stage: str  # "fingerprint", "decode", "timeout" or "crash"


@dataclass
class BuildReport:
    """What :func:`build_cache` did: entries decoded now, entries already present, failures."""

    built: int = 0
    cached: int = 0
    refs: dict[str, MediaRef] = field(default_factory=dict)  # absolute source path -> reference
    failures: list[BuildFailure] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures


def _fingerprint_task(root: str, source: str) -> str:
    return MediaCache(root).fingerprint(source).sha256


def _build_task(root: str, source: str, params: DecodeParams, threads: int, verify: bool) -> tuple[str, bool]:
    cache = MediaCache(root, strict_params=False, threads=threads)
    ref, built = cache.build(source, params, check=True, verify=verify)
    assert ref.key is not None
    return ref.key, built


def build_cache(
    sources: Iterable[str | os.PathLike[str]],
    params: DecodeParams,
    root: str | os.PathLike[str],
    *,
    workers: int = 1,
    timeout: float | None = 600.0,
    threads: int | None = None,
    progress: bool = True,
    verify: bool = False,
) -> BuildReport:
    """Cache every distinct video in ``sources`` under ``root``; incremental: present entries are
    checked (header and key; frames and checksum with ``verify``, or when a load noted them damaged)
    and rebuilt when damaged. ``threads`` is each worker's decoder thread count (default: the CPU
    count shared among the workers); ``timeout`` bounds each video."""
    from tqdm import tqdm

    start = time.monotonic()
    report = BuildReport()
    paths = sorted({os.path.abspath(s) for s in sources})
    workers = max(1, workers)
    if threads is None:
        threads = max(1, (os.cpu_count() or 1) // workers)
    bar_options = {"disable": not progress, "file": sys.stderr, "unit": " videos", "dynamic_ncols": True}

    content: dict[str, list[str]] = {}  # sha256 -> paths holding that content
    with WorkerPool(min(workers, max(len(paths), 1)), preload=["videorl.media.build"]) as pool:
        with tqdm(total=len(paths), desc="fingerprint", **bar_options) as bar:
            for result in pool.run(_fingerprint_task, [(str(root), p) for p in paths], timeout=timeout):
                path = paths[result.index]
                if result.ok:
                    content.setdefault(result.value, []).append(path)
                else:
                    stage = "fingerprint" if result.stage == "task" else result.stage
                    report.failures.append(BuildFailure(path, result.value, stage))
                bar.update()

        groups = list(content.values())
        tasks = [(str(root), group[0], params, threads, verify) for group in groups]
        with tqdm(total=len(tasks), desc="cache build", **bar_options) as bar:
            for result in pool.run(_build_task, tasks, timeout=timeout):
                group = groups[result.index]
                if result.ok:
                    key, built = result.value
                    report.built += int(built)
                    report.cached += int(not built)
                    for path in group:
                        report.refs[path] = MediaRef(path, key)
                else:
                    stage = "decode" if result.stage == "task" else result.stage
                    report.failures.extend(
                        BuildFailure(path, _as_seen_from(result.value, group[0], path), stage)
                        for path in group
                    )
                bar.update()
    report.failures.sort(key=lambda f: f.video)
    report.seconds = time.monotonic() - start
    return report


def _as_seen_from(reason: str, decoded: str, path: str) -> str:
    """A failure of ``decoded`` told for ``path``, a file with the same content that was not decoded
    itself: the reason names ``path`` and says which copy was decoded."""
    if path == decoded:
        return reason
    return f"{reason.replace(decoded, path)} (decoded as {decoded}, a file with the same content)"
