"""The evaluator: loading, generation and scoring of benchmark rows as three overlapped stages.

::

    rows ──▶ loader threads (cached frames, prompt, backend.encode) ──bounded queue──▶ engine
         ──▶ scoring (adapter extract + score) ──▶ RUN/NAME/predictions.jsonl (appended, fsynced)
         ──▶ at the end: rescored from the file (videorl.eval.scoring) ──▶ results.json, scores.jsonl

- Loaders: ``workers`` threads; the queue between them and the engine holds at most ``queue_size``
  encoded prompts, which caps memory whatever the benchmark's size.
- Engine: an engine with ``submit`` (the ``AsyncLLM`` engine) receives every prompt as soon as it is
  encoded and batches continuously itself, with at most ``queue_size`` in flight; any other engine
  (HF ``generate``) gets what is ready, up to ``batch_size`` prompts per call, having waited up to
  ``batch_wait`` seconds after the first for more to be ready (fewer, fuller batches: on CPU a padded
  batch of 2 costs about twice a batch of 1, one of 8 little more, and the engine's spare time goes to
  the loaders; the wait ends as soon as the batch is full or the loaders are done).
- Scoring runs in the calling thread, which also drives the progress bar.
- With a workflow (``agent``: :class:`~videorl.eval.agent.AgentRollout`, ``--workflow tool_agent``)
  each prompt offers its tools and each batch goes through the workflow's turns on the engine
  (batched ``generate``, whatever the engine); the record adds the row's calls and turns.

Resumable by sample id: rows whose prediction is already in the file (with a response) are skipped;
failed rows are run again (a later record of an id wins). A row that fails (missing video, unreadable
media, encoding or engine error) is recorded with its reason and scores 0: it stays in the
denominator. A batch whose generation raises is retried one prompt at a time, so one bad sample
cannot fail the others.
"""

from __future__ import annotations

import concurrent.futures
import json
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.errors import ConfigError, VideorlError
from videorl.eval.predictions import Prediction, append_prediction, read_predictions
from videorl.eval.results import predictions_path, record_result, write_timing
from videorl.eval.scoring import BenchmarkResult, score_predictions, score_row

if TYPE_CHECKING:
    from videorl.benchmark import Benchmark, BenchmarkRow
    from videorl.eval.agent import AgentRollout
    from videorl.eval.inputs import RowInputs
    from videorl.generation import Completion, SamplingParams
    from videorl.model_inputs import EncodedPrompt
    from videorl.registry import Registry

__all__ = [
    "BATCH_WAIT_S",
    "EvalTask",
    "Evaluator",
    "RunReport",
    "StageTimes",
    "load_task",
    "prediction_record",
    "score_tasks",
    "timing_summary",
]

#: seconds the batching engine stage may wait for a fuller batch after the first prompt is ready
BATCH_WAIT_S = 0.5

_END = object()  # end of a stage's stream
_POLL = 0.1  # seconds between checks of the stop flag while blocked on a queue


@dataclass
class EvalTask:
    """One benchmark to evaluate: its registered name (the run's folder), adapter and rows."""

    name: str
    benchmark: Benchmark
    rows: list[BenchmarkRow]
    data_root: Path


def load_task(
    benchmarks: Registry[Any], name: str, data_root: Path | str, *, limit: int | None = None
) -> EvalTask:
    """The rows of benchmark ``name`` under ``data_root`` (the first ``limit`` when given).

    A missing directory or a malformed annotation raises the adapter's :class:`DataError`, which
    names the file and line.
    """
    canonical = benchmarks.canonical(name)
    benchmark = benchmarks.create(canonical)
    rows = benchmark.load(Path(data_root))
    return EvalTask(canonical, benchmark, rows[:limit] if limit is not None else rows, Path(data_root))


@dataclass
class StageTimes:
    """Where a run's time went. ``load_s``, ``encode_s`` and ``score_s`` add up the time of every
    sample (loaders overlap, so they may exceed the wall time); ``engine_s`` is the time the engine
    was busy; ``engine_idle_s`` the time it waited for input."""

    wall_s: float = 0.0
    load_s: float = 0.0
    encode_s: float = 0.0
    engine_s: float = 0.0
    engine_idle_s: float = 0.0
    score_s: float = 0.0
    samples: int = 0
    failed: int = 0
    resumed: int = 0
    engine_calls: int = 0
    samples_generated: int = 0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}
        out["mean_batch"] = round(self.samples_generated / self.engine_calls, 2) if self.engine_calls else 0.0
        return out


@dataclass
class RunReport:
    """What :meth:`Evaluator.run` returns: each benchmark's scored result and the stage times."""

    results: dict[str, BenchmarkResult]
    times: StageTimes


@dataclass
class _Item:
    task: EvalTask
    row: BenchmarkRow
    encoded: EncodedPrompt | None = None
    completion: Completion | None = None
    error: str | None = None
    stage: str | None = None
    extras: dict[str, Any] | None = None  # a workflow's record of the row (calls, turns)

    @property
    def sample_id(self) -> str:
        return f"{self.task.name}:{self.row.id}"


def _reason(exc: BaseException) -> str:

    return str(exc) if isinstance(exc, VideorlError) else f"{type(exc).__name__}: {exc}"


class Evaluator:
    """Runs benchmark rows through loader threads, an engine and the adapters' scoring.

    ``inputs`` builds each row's prompt and media, ``engine`` is a rollout engine (``generate``, and
    optionally ``submit(prompt, params) -> Future``), ``sampling`` the sampling parameters (``n``
    must be 1: one response per question); ``agent``: answer through that workflow's turns instead.
    """

    def __init__(
        self,
        inputs: RowInputs,
        engine: Any,
        sampling: SamplingParams,
        *,
        workers: int = 2,
        batch_size: int = 8,
        queue_size: int | None = None,
        batch_wait: float = BATCH_WAIT_S,
        agent: AgentRollout | None = None,
    ) -> None:
        if sampling.n != 1:
            raise ConfigError(f"evaluation samples one response per question; got n={sampling.n}")
        if workers < 1 or batch_size < 1 or batch_wait < 0:
            raise ConfigError(
                f"workers ({workers}) and batch_size ({batch_size}) must be >= 1, batch_wait ({batch_wait}) "
                ">= 0"
            )
        self.inputs = inputs
        self.engine = engine
        self.sampling = sampling
        self.workers = workers
        self.batch_size = batch_size
        self.batch_wait = batch_wait
        self.agent = agent
        self.queue_size = max(queue_size or 2 * batch_size + workers, batch_size)  # a full batch must fit
        self.tokenizer = inputs.backend.processor.tokenizer

    def describe(self) -> dict[str, Any]:
        """The pipeline's concurrency and engine details (recorded, informative)."""
        describe = getattr(self.engine, "describe", None)
        mode = "submit" if self.submits else "batched generate"
        return {
            "workers": self.workers,
            "batch_size": self.batch_size,
            "queue_size": self.queue_size,
            "batch_wait_s": self.batch_wait,
            "engine_mode": mode if self.agent is None else f"workflow {self.agent.name}, {mode}",
            **({"engine": describe()} if callable(describe) else {}),
        }

    @property
    def submits(self) -> bool:
        """Prompts go one by one to the engine's ``submit``: an engine with one, without a workflow."""
        return self.agent is None and hasattr(self.engine, "submit")

    # --- the run ------------------------------------------------------------------------------

    def run(
        self,
        tasks: Sequence[EvalTask],
        run_dir: Path | str,
        *,
        progress: bool = False,
    ) -> RunReport:
        """Evaluate every row of ``tasks`` not yet predicted in ``run_dir``, then score each benchmark."""
        run_dir = Path(run_dir)
        times = StageTimes()
        started = time.perf_counter()
        items: list[_Item] = []
        for task in tasks:
            path = predictions_path(run_dir, task.name)
            done = {i for i, p in read_predictions(path).items() if not p.failed} if path.exists() else set()
            pending = [_Item(task, row) for row in task.rows if row.id not in done]
            times.resumed += len(task.rows) - len(pending)
            items += pending
        if items:
            self._pipeline(items, run_dir, times, progress)
        results = score_tasks(tasks, run_dir)
        times.wall_s = time.perf_counter() - started
        write_timing(run_dir, times.as_dict())
        return RunReport(results, times)

    def _pipeline(
        self,
        items: list[_Item],
        run_dir: Path,
        times: StageTimes,
        progress: bool,
    ) -> None:
        from tqdm import tqdm

        jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for item in items:
            jobs.put(item)
        for _ in range(self.workers):
            jobs.put(_END)
        ready: queue.Queue[Any] = queue.Queue(maxsize=self.queue_size)
        done: queue.Queue[Any] = queue.Queue()
        run = _Run(self, times, ready, done)
        threads = [
            threading.Thread(target=run.guard(run.load, jobs), name=f"eval-load-{i}", daemon=True)
            for i in range(self.workers)
        ]
        threads.append(threading.Thread(target=run.guard(run.generate), name="eval-engine", daemon=True))
        for thread in threads:
            thread.start()
        bar = tqdm(total=len(items), desc="eval", unit=" samples", disable=not progress, file=sys.stderr)
        try:
            while True:
                item = run.get(done)
                if item is _END:
                    break
                start = time.perf_counter()
                record = self._record(item)
                append_prediction(predictions_path(run_dir, item.task.name), record)
                times.score_s += time.perf_counter() - start
                times.samples += 1
                times.failed += "error" in record
                bar.update(1)
                bar.set_postfix(failed=times.failed, refresh=False)
        finally:
            run.stop.set()
            bar.close()
            for thread in threads:
                thread.join(timeout=5)
        if run.errors:
            raise run.errors[0]

    def _record(self, item: _Item) -> dict[str, Any]:
        """The predictions-file record of a finished item, scored by the adapter."""
        return prediction_record(
            item.task.benchmark, item.row, item.completion, self.tokenizer,
            error=item.error, stage=item.stage, extras=item.extras,
        )  # fmt: skip


def prediction_record(
    benchmark: Benchmark,
    row: BenchmarkRow,
    completion: Completion | None,
    tokenizer: Any,
    *,
    error: str | None = None,
    stage: str | None = None,
    extras: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The predictions-file record of one row: its decoded response scored by the adapter, with
    ``extras`` (a workflow's calls and turns, :func:`videorl.eval.agent.episode_record`), or (no
    ``completion``) the ``error`` of the ``stage`` where it failed."""
    if completion is None:
        return {"id": row.id, "error": error or "no response", "stage": stage}
    response = tokenizer.decode(completion.token_ids, skip_special_tokens=True)
    result = score_row(benchmark, row, Prediction(row.id, response))
    record: dict[str, Any] = {
        "id": row.id,
        "response": response,
        "prediction": result.prediction,
        "score": result.score,
        "num_output_tokens": len(completion.token_ids),
        "finish_reason": completion.finish_reason,
    }
    if result.failed is not None:
        record["scoring_error"] = result.failed
    record.update(extras or {})
    try:
        json.dumps(result.prediction, allow_nan=False)
    except (TypeError, ValueError):  # an adapter returned something JSON cannot hold: keep its text
        record["prediction"] = repr(result.prediction)
    return record


def score_tasks(tasks: Sequence[EvalTask], run_dir: Path) -> dict[str, BenchmarkResult]:
    """Each benchmark rescored from its predictions file, written into ``run_dir`` (``results.json``,
    ``scores.jsonl``)."""
    results = {}
    for task in tasks:
        path = predictions_path(run_dir, task.name)
        saved: Mapping[str, Prediction] = read_predictions(path) if path.exists() else {}
        result = score_predictions(task.benchmark, task.rows, saved)
        record_result(run_dir, result)
        results[task.name] = result
    return results


class _Run:
    """The state the stages of one :meth:`Evaluator._pipeline` share."""

    def __init__(
        self, evaluator: Evaluator, times: StageTimes, ready: queue.Queue[Any], done: queue.Queue[Any]
    ) -> None:
        self.ev = evaluator
        self.times = times
        self.ready = ready
        self.done = done
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.loaders = evaluator.workers

    def guard(self, fn: Callable[..., None], *args: Any) -> Callable[[], None]:
        """``fn`` for a thread: an unexpected error stops the run and is re-raised by the caller."""

        def target() -> None:
            try:
                fn(*args)
            except BaseException as exc:  # reported to the calling thread
                with self.lock:
                    self.errors.append(exc)
                self.stop.set()

        return target

    def get(self, q: queue.Queue[Any]) -> Any:
        while True:
            try:
                return q.get(timeout=_POLL)
            except queue.Empty:
                if self.stop.is_set():
                    return _END

    def put(self, q: queue.Queue[Any], item: Any) -> bool:
        while not self.stop.is_set():
            try:
                q.put(item, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    # --- stage 1: loader threads ---------------------------------------------------------------

    def load(self, jobs: queue.SimpleQueue[Any]) -> None:
        try:
            while not self.stop.is_set():
                item = jobs.get()
                if item is _END:
                    break
                self.prepare(item)
                if not self.put(self.ready, item):
                    break
        finally:
            with self.lock:
                self.loaders -= 1
                last = self.loaders == 0
            if last:
                self.put(self.ready, _END)

    def prepare(self, item: _Item) -> None:
        start = time.perf_counter()
        try:
            prompt = self.ev.inputs.prompt(item.task.benchmark, item.row, item.sample_id)
            if self.ev.agent is not None:
                prompt = self.ev.agent.offer(prompt)
        except Exception as exc:  # a missing or unreadable file fails this sample only
            item.error, item.stage = _reason(exc), "load"
            return
        finally:
            loaded = time.perf_counter()
            with self.lock:
                self.times.load_s += loaded - start
        try:
            item.encoded = self.ev.inputs.backend.encode(prompt)
        except Exception as exc:
            item.error, item.stage = _reason(exc), "encode"
        finally:
            with self.lock:
                self.times.encode_s += time.perf_counter() - loaded

    # --- stage 2: the engine -------------------------------------------------------------------

    def generate(self) -> None:
        try:
            if self.ev.submits:
                self._submit_all()
            else:
                self._batches()
        finally:
            self.done.put(_END)

    def _next(self) -> Any:
        start = time.perf_counter()
        item = self.get(self.ready)
        self.times.engine_idle_s += time.perf_counter() - start
        return item

    def _batches(self) -> None:
        finished = False
        while not finished and not self.stop.is_set():
            item = self._next()
            deadline = time.perf_counter() + self.ev.batch_wait
            batch: list[_Item] = []
            while True:
                if item is _END:
                    finished = True
                    break
                if item.encoded is None:
                    self.done.put(item)
                else:
                    batch.append(item)
                if len(batch) >= self.ev.batch_size:
                    break
                item = self._more(deadline)
                if item is None:
                    break
            if batch:
                self._generate(batch)

    def _more(self, deadline: float) -> Any:
        """The next ready item, waiting until ``deadline`` at most; ``None`` when none came by then."""
        start = time.perf_counter()
        try:
            left = deadline - start
            return self.ready.get(timeout=left) if left > 0 else self.ready.get_nowait()
        except queue.Empty:
            return None
        finally:
            self.times.engine_idle_s += time.perf_counter() - start

    def _generate(self, batch: list[_Item]) -> None:
        start = time.perf_counter()
        try:
            answers = self._answers([i.encoded for i in batch])
        except Exception as exc:
            self.times.engine_s += time.perf_counter() - start
            if len(batch) == 1:
                batch[0].error, batch[0].stage, batch[0].encoded = (
                    f"engine error: {_reason(exc)}",
                    "engine",
                    None,
                )
                self.done.put(batch[0])
            else:  # find the sample that breaks the batch; the others still get their answers
                for item in batch:
                    self._generate([item])
            return
        self.times.engine_s += time.perf_counter() - start
        self.times.engine_calls += 1
        self.times.samples_generated += len(batch)
        for item, (completion, extras) in zip(batch, answers, strict=True):
            item.completion, item.extras, item.encoded = completion, extras, None
            self.done.put(item)

    def _answers(self, prompts: list[Any]) -> list[tuple[Completion, dict[str, Any] | None]]:
        """Each prompt's response (a workflow's: its episode's last turn, with its record)."""
        ev = self.ev
        if ev.agent is not None:
            return list(ev.agent.generate(ev.engine, ev.inputs.backend, prompts))
        return [(group[0], None) for group in ev.engine.generate(prompts, ev.sampling)]

    def _submit_all(self) -> None:
        slots = threading.Semaphore(self.ev.queue_size)
        in_flight = threading.Condition()
        pending = 0
        busy = _BusyClock()

        def finish(item: _Item, future: concurrent.futures.Future[Any]) -> None:
            nonlocal pending
            try:
                item.completion = future.result()[0]
            except Exception as exc:
                item.error, item.stage = f"engine error: {_reason(exc)}", "engine"
            item.encoded = None
            busy.leave()
            slots.release()
            self.done.put(item)
            with in_flight:  # counted last: the end marker must not overtake this item
                pending -= 1
                in_flight.notify_all()

        while not self.stop.is_set():
            item = self._next()
            if item is _END:
                break
            if item.encoded is None:
                self.done.put(item)
                continue
            while not slots.acquire(timeout=_POLL):
                if self.stop.is_set():
                    return
            busy.enter()
            with in_flight:
                pending += 1
            try:
                future = self.ev.engine.submit(item.encoded, self.ev.sampling)
            except Exception as exc:
                future = concurrent.futures.Future()
                future.set_exception(exc)
            self.times.engine_calls += 1
            self.times.samples_generated += 1
            future.add_done_callback(lambda f, item=item: finish(item, f))
        with in_flight:
            while pending and not self.stop.is_set():
                in_flight.wait(timeout=_POLL)
        self.times.engine_s += busy.total()


class _BusyClock:
    """Time during which at least one request was in flight (the async engine's busy time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._since = 0.0
        self._total = 0.0

    def enter(self) -> None:
        with self._lock:
            if self._active == 0:
                self._since = time.perf_counter()
            self._active += 1

    def leave(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0:
                self._total += time.perf_counter() - self._since

    def total(self) -> float:
        with self._lock:
            return self._total


def timing_summary(report: RunReport) -> str:
    """One line on where the time went."""
    t = report.times
    return (
        f"{t.samples} samples in {t.wall_s:.1f} s ({t.resumed} already done, {t.failed} failed); "
        f"engine busy {t.engine_s:.1f} s in {t.engine_calls} calls, idle {t.engine_idle_s:.1f} s; "
        f"load {t.load_s:.1f} s, encode {t.encode_s:.1f} s, scoring {t.score_s:.1f} s (summed over samples)"
    )
