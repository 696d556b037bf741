"""``trainer.benchmarks`` passes beside training on Ray: the benchmark workers (``ray.benchmark_workers``).

Each benchmark worker hosts a rollout engine of its own. When passes are due after step ``s``, the
controller hands the group step ``s``'s weights as a published version (split placement: the one the
step's weight sync published for the rollout workers; colocated: gathered then) and goes on to the next
step; the group loads them, answers and scores the rows with the code of the passes between steps
(:class:`~videorl.train.benchmarks.BenchmarkPasses`: the same files, records and scores), and the
metrics are logged in the row of the first step after they arrive, with ``bench/NAME/step`` = ``s``
(the step whose weights they score, which trackers plot them against) and ``bench/NAME/seconds`` (the
pass's wall time on the group). ``time/benchmarks`` is what the loop waited, not what the pass took.

So that a metrics row holds at most one pass of a benchmark:

- the group runs one job (the passes due at one step) at a time: a pass due while the previous job
  runs waits for it (the loop stalls, and ``time/benchmarks`` says for how long);
- the passes of a benchmark's last steps (the one after the last step, and any due on the steps
  right before it) are waited for at their step, and the group is drained on the step before those.

**Resume.** Before it answers a row, the first benchmark worker writes the job's weights next to its
passes (``RUN/benchmarks/step_NNNNNN/weights.safetensors``, atomically), removed when the job ends; a
checkpoint waits for that write. A run resumed from a checkpoint taken while a job ran loads them and
finishes its passes, asking only the rows not yet answered; a finished pass whose metrics were in rows
the resumed run dropped is logged again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.atomic import is_temp
from videorl.cluster import wire
from videorl.cluster.benchmark_rows import rows_runner, shared_rows
from videorl.cluster.runtime import WorkerFailure
from videorl.cluster.weights import Published
from videorl.errors import VideorlError
from videorl.runs.history import read_metrics
from videorl.runs.records import METRICS_FILE
from videorl.train.benchmarks import CHUNK_ROWS, PASSES_DIR, BenchmarkPasses, summary_metrics
from videorl.train.loop import periodic_due

if TYPE_CHECKING:
    from videorl.cluster.controller import Controller
    from videorl.cluster.runtime import WorkerHandle

WEIGHTS_FILE = "weights.safetensors"

log = logging.getLogger("videorl.cluster.benchmark_group")

_Results = list[tuple[str, dict[str, float]]]


def weights_path(output_dir: Path | str, step: int) -> Path:
    """Where the weights of the passes at ``step`` are kept while they run."""
    return Path(output_dir) / PASSES_DIR / f"step_{step:06d}" / WEIGHTS_FILE


def _remove_kept(path: Path) -> None:
    """Remove kept weights, and their step's folder when nothing else is in it (no pass began)."""
    path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty: the passes' own directories
        path.parent.rmdir()


_PLAN_KEY = "videorl_benchmark_plan"


def plan_metadata(plan: dict[str, Any]) -> dict[str, str]:
    """``plan`` (the policy ``version``, the ``benchmarks`` to score, the ``training`` record of the
    weights) as the metadata of a kept weights file (``Worker.keep_weights``)."""
    return {_PLAN_KEY: json.dumps(plan)}


def plan_of(metadata: Mapping[str, str]) -> dict[str, Any]:
    """The plan in a kept weights file's metadata; ``{}`` when it has none."""
    plan = json.loads(metadata.get(_PLAN_KEY, "{}"))
    return plan if isinstance(plan, dict) else {}


def read_plan(path: Path | str) -> dict[str, Any]:
    """The plan of a kept weights file (its header only); ``{}`` when it has none or is damaged."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return plan_of(f.metadata() or {})
    except Exception as exc:  # a damaged file: its passes cannot be finished
        log.warning("%s cannot be read (%s): its benchmark passes cannot be finished", path, exc)
        return {}


@dataclass
class _Work:
    """One step of a job: its benchmarks, the weights (published, or kept in a file by an earlier
    run) and, for kept ones, the record of them (:meth:`BenchmarkPasses.policy`)."""

    step: int
    names: list[str]
    source: Published | Path
    training: dict[str, Any] | None = None


@dataclass
class _Job:
    """Passes running on the group: their steps and benchmarks, the result, and whether their weights
    are on disk yet (set too when the job failed before)."""

    work: list[tuple[int, list[str]]]
    future: Future[_Results]
    kept: threading.Event

    @property
    def names(self) -> set[str]:
        return {name for _, names in self.work for name in names}


class BenchmarkGroup:
    """The loop's periodic evaluation of ``trainer.benchmarks`` on the benchmark workers (module
    docstring): a job started on its due steps, its results reported when they are in."""

    name = PASSES_DIR

    def __init__(self, passes: BenchmarkPasses, controller: Controller) -> None:
        """``passes``: the run's (``resumed_from`` is where the run starts); ``controller``: the driver,
        which publishes the weights the passes score."""
        self.passes, self.controller, self.cluster = passes, controller, controller.cluster
        config = passes.config
        self.output_dir, self.last = Path(config.output_dir), config.trainer.max_steps
        self.save_every, self.start = config.trainer.save_every, passes.resumed_from
        workers = len(self.cluster.benchmarkers)
        ask = shared_rows(self._ask, workers, list(range(workers)))
        self._runner = rows_runner(ask, CHUNK_ROWS * workers)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="videorl-benchmarks")
        self._job: _Job | None = None
        self._closed = False
        self._workers_lost = False  # a benchmark worker died: no further pass can run
        self._running_step = 0
        self._queued: _Results = []  # results waiting for a row without that benchmark's metrics
        self._tails = {b.spec.name: self._tail_start(b.spec.name) for b in passes.benchmarks}
        self._recover()

    def close(self) -> None:
        """Let a job in flight end with the workers, without scoring more (its weights stay on disk: a
        resumed run finishes its passes)."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- the loop's evaluation --------------------------------------------------------------------

    def due(self, step: int, last_step: int) -> bool:
        job = self._job
        return (
            bool(self.passes.due(step, last_step))
            or bool(self._queued)
            or (
                job is not None
                and (job.future.done() or self._drains(job, step) or self._save_waits(job, step))
            )
        )

    def __call__(self, step: int) -> dict[str, float]:
        """Report what has arrived, start the passes due at ``step`` with its weights, and wait only
        where the rules of the module docstring say."""
        names = self.passes.due(step, self.last)
        job = self._job
        if job is not None and (names or job.future.done() or self._drains(job, step)):
            self._collect()
        if names and self._workers_lost:
            log.error(
                "step %d: benchmark pass(es) %s skipped: a benchmark worker died earlier in this run "
                "(continue it with --resume auto from a checkpoint to have the group again)",
                step, ", ".join(names),
            )  # fmt: skip
        elif names:
            self._start([_Work(step, names, self.controller.current_weights())])
            if any(step >= self._tails[name] for name in names):
                self._collect()
        if self._job is not None and self._save_waits(self._job, step):
            self._job.kept.wait()  # the checkpoint written after this call must find them on disk
        metrics = self._report()
        if step == self.last and self._queued:
            where = ", ".join(sorted({name for name, _ in self._queued}))
            log.warning(
                "the run ends with benchmark results no metrics row could hold (%s): they are in %s",
                where, self.output_dir / PASSES_DIR,
            )  # fmt: skip
        return metrics

    # --- jobs -------------------------------------------------------------------------------------

    def _start(self, work: list[_Work]) -> None:
        kept, plan = threading.Event(), [(item.step, item.names) for item in work]
        self._job = _Job(plan, self._pool.submit(self._run, list(work), kept), kept)

    def _run(self, work: list[_Work], kept: threading.Event) -> _Results:
        """On the group's thread: load each item's weights into every benchmark worker (the first one
        keeps published ones on disk first, with the plan), score its benchmarks, then drop the kept
        file; a file is left for ``--resume`` when the run stops or a worker dies under its passes."""
        workers, results = self.cluster.benchmarkers, []
        try:
            while work:
                item = work.pop(0)  # so that nothing here holds a published version once loaded
                step, names, source = item.step, item.names, item.source
                self._running_step = step
                path = weights_path(self.output_dir, step)
                calls: list[tuple[WorkerHandle, str, tuple[Any, ...]]]
                kept_by_earlier_run: dict[str, Any] | None = None
                if isinstance(source, Published):  # this run's weights after step
                    plan = {"version": step, "benchmarks": names, "training": self.passes.policy(step)}
                    calls = [(workers[0], "keep_weights", (source.handle, str(path), plan))]
                    calls += [(w, "load_weights", (source.handle, step)) for w in workers]
                else:
                    kept_by_earlier_run = item.training or self.passes.policy(step)
                    calls = [(w, "load_weights_file", (str(source), step)) for w in workers]
                self._call("benchmark weights", step, calls)
                kept.set()
                del source, calls, item  # the object store frees the version once the workers hold it
                for name in names:
                    if self._closed or self._workers_lost:
                        break
                    started = time.perf_counter()
                    got = self.passes.run_each(step, self._runner, [name], training=kept_by_earlier_run)
                    seconds = time.perf_counter() - started
                    results += [(n, {**m, f"bench/{n}/seconds": seconds}) for n, m in got.items()]
                if self._closed or self._workers_lost:
                    break  # the kept weights stay: a resumed run finishes these passes
                _remove_kept(path)
        finally:
            kept.set()
        return results

    def _call(
        self, stage: str, step: int, calls: list[tuple[WorkerHandle, str, tuple[Any, ...]]]
    ) -> list[Any]:
        """``Cluster.call``, noting a benchmark worker's death (the group cannot run passes after it)."""
        try:
            return self.cluster.call(stage, step, calls)
        except WorkerFailure as exc:
            self._workers_lost = self._workers_lost or exc.died
            raise

    def _ask(self, stage: str, requests: list[dict[str, Any]]) -> list[Any]:
        workers = self.cluster.benchmarkers
        calls = [(w, "generate_benchmark", (wire.dumps(r),)) for w, r in zip(workers, requests)]
        return [wire.loads(reply) for reply in self._call(stage, self._running_step, calls)]

    def _collect(self) -> None:
        """Wait for the job in flight; queue its results (a failure is logged, or raised when strict)."""
        job, self._job = self._job, None
        assert job is not None
        try:
            self._queued += job.future.result()
        except Exception as exc:
            steps = ", ".join(str(step) for step, _ in job.work)
            reason = str(exc) if isinstance(exc, VideorlError) else f"{type(exc).__name__}: {exc}"
            if self.passes.strict:
                if isinstance(exc, VideorlError):
                    raise  # a pass's own error, or a worker's failure, named
                stops = "trainer.benchmarks_strict stops the run"
                raise VideorlError(f"benchmark pass of step {steps} failed: {reason} ({stops})") from exc
            log.error("benchmark pass of step %s failed: %s; training goes on", steps, reason)

    def _report(self) -> dict[str, float]:
        """The queued results for this row, oldest first, at most one per benchmark."""
        metrics: dict[str, float] = {}
        waiting: _Results = []
        for name, values in self._queued:
            if any(key.startswith(f"bench/{name}/") for key in metrics):
                waiting.append((name, values))
            else:
                metrics.update(values)
        self._queued = waiting
        return metrics

    # --- when to wait -----------------------------------------------------------------------------

    def _tail_start(self, name: str) -> int:
        """The first of the benchmark's last due steps without a gap (its passes there are waited for)."""
        first = self.last
        while first - 1 > self.start and name in self.passes.due(first - 1, self.last):
            first -= 1
        return first

    def _drains(self, job: _Job, step: int) -> bool:
        """Whether the job must be done by ``step``: the step before a tail of one of its benchmarks."""
        return any(step == self._tails[name] - 1 for name in job.names)

    def _save_waits(self, job: _Job, step: int) -> bool:
        return not job.kept.is_set() and periodic_due(step, self.save_every, self.last, at_last=True)

    # --- resume -----------------------------------------------------------------------------------

    def _recover(self) -> None:
        """Queue the finished passes up to the resumed step whose metrics the kept rows lack, start the
        unfinished ones whose weights were kept, and remove kept weights nothing needs (and the
        partial files of a write that was killed)."""

        root = self.output_dir / PASSES_DIR
        if not root.is_dir():
            return
        metrics_file = self.output_dir / METRICS_FILE
        rows = read_metrics(metrics_file) if metrics_file.is_file() else []
        configured = [b.spec.name for b in self.passes.benchmarks]
        reported = set()
        for row in rows:  # a row without bench/NAME/step (an older run's) reports its own step's pass
            for name in configured:
                scored = row.get(
                    f"bench/{name}/step", row["step"] if f"bench/{name}/overall" in row else None
                )
                if isinstance(scored, (int, float)):
                    reported.add((name, int(scored)))
        work: list[_Work] = []
        for step_dir in sorted(root.glob("step_*")):
            try:
                step = int(step_dir.name.removeprefix("step_"))
            except ValueError:
                continue
            for partial in step_dir.iterdir():
                if is_temp(partial) and partial.name.startswith(f".{WEIGHTS_FILE}"):
                    partial.unlink(missing_ok=True)
            weights = step_dir / WEIGHTS_FILE
            if step > self.start:  # this run trains the step again: its passes start anew
                _remove_kept(weights)
                continue
            summaries = {name: self.passes.recorded(step, name) for name in configured}
            for name, summary in summaries.items():
                if summary is not None and (name, step) not in reported:
                    self._queued.append((name, summary_metrics(name, summary, step)))
            unfinished = [name for name, summary in summaries.items() if summary is None]
            if weights.is_file():
                item = self._kept(step, weights, configured, unfinished)
                if item is not None:
                    work.append(item)
                    unfinished = [name for name in unfinished if name not in item.names]
                else:
                    _remove_kept(weights)
            unfinished = [
                name
                for name in unfinished
                if (directory := self.passes.directory(step, name)) is not None and directory.exists()
            ]
            if unfinished:
                log.warning(
                    "benchmark pass(es) %s of step %d were interrupted before their weights were kept: "
                    "they stay unfinished in %s (videorl eval run on a checkpoint of that step scores them)",
                    ", ".join(unfinished), step, step_dir,
                )  # fmt: skip
        if work and self.start >= self.last:
            log.warning("the run is complete: the kept benchmark weights in %s are not used", root)
        elif work:
            log.warning(
                "finishing the benchmark passes of step(s) %s, interrupted by the last run, with the weights "
                "it kept for them (%s)", ", ".join(str(w.step) for w in work), root / "step_*" / WEIGHTS_FILE,
            )  # fmt: skip
            self._start(work)

    def _kept(self, step: int, weights: Path, configured: list[str], unfinished: list[str]) -> _Work | None:
        """The passes of ``step`` an earlier run kept ``weights`` for that are ``unfinished``; None when
        there are none left (or the file is not the weights of that step)."""
        plan = read_plan(weights)
        if plan.get("version") != step or not isinstance(plan.get("benchmarks"), list):
            log.warning("%s is not the weights of step %d's benchmark passes: removed", weights, step)
            return None
        gone = [n for n in plan["benchmarks"] if n not in configured]
        if gone:
            log.warning(
                "step %d: benchmark(s) %s are no longer in trainer.benchmarks: their passes are not finished",
                step, ", ".join(map(str, gone)),
            )  # fmt: skip
        names = [n for n in plan["benchmarks"] if n in unfinished]
        training = plan.get("training") if isinstance(plan.get("training"), dict) else None
        return _Work(step, names, weights, training) if names else None
