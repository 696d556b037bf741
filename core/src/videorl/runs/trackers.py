"""Experiment loggers: where a run's per-step metrics and an evaluation's summary go.

A logger is registered through the ``register_loggers`` hook; its target is called as
``factory(run, **options)`` with a :class:`RunContext` and the options of ``trainer.logger_options[name]``
(or ``videorl eval run --logger-option``), and returns a :class:`Logger`. First party: ``jsonl``
(``metrics.jsonl``, the run's own record, which resumes and ``videorl plot`` read), ``tensorboard``,
``wandb`` and ``mlflow`` (each library imported only when its logger is enabled).

:class:`videorl.runs.records.MetricsWriter` sends each step's row to every logger. A logger marked
``required`` (``jsonl``) fails the run when it fails; any other one is called from its own thread through
a bounded queue, and one that raises, or does not answer a call within :data:`TRACKER_DEADLINE` seconds
(opening it included), is reported once, as a warning naming it, and left out for the rest of the run:
a tracker going down or hanging never stops or stalls training.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import secrets
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from videorl import __version__
from videorl.atomic import atomic_write_text
from videorl.errors import ConfigError, VideorlError
from videorl.runs.history import git_revision, truncate_after

if TYPE_CHECKING:
    from videorl.registry import Registry

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
#: ids of the tracker runs of a run directory, so that a resumed run continues the same tracker run
TRACKER_IDS_FILE = "trackers.json"
#: what MLflow refuses in a metric name (it takes alphanumerics, _ - . space : /)
_MLFLOW_UNSAFE = re.compile(r"[^\w\-. :/]")


@dataclass
class RunContext:
    """What a logger knows of the run it records.

    ``kind``: ``"train"`` or ``"eval"``; ``start_step``: the step a training run resumes after (0:
    fresh); ``config``: the resolved configuration as plain data; ``metadata``: ``run.json`` (videorl
    and package versions, the git revision, the command line, plugin modules) and ``requirements``
    (the ``name==version`` of videorl and every plugin distribution).
    """

    run_dir: Path
    kind: Literal["train", "eval"] = "train"
    start_step: int = 0
    config: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.run_dir.name

    def tracker_id(self, logger: str, new: str | None = None) -> str | None:
        """The id this run directory's ``logger`` run was given (``new``: record it)."""
        path = self.run_dir / TRACKER_IDS_FILE
        ids: dict[str, str] = json.loads(path.read_text()) if path.is_file() else {}
        if new is not None:
            ids[f"{self.kind}/{logger}"] = new
            atomic_write_text(path, json.dumps(ids, indent=2) + "\n")
        return ids.get(f"{self.kind}/{logger}")


@runtime_checkable
class Logger(Protocol):
    """One destination of a run's metrics. ``row`` is flat: ``step``, ``time`` and ``name: value`` with
    values numbers, strings or ``None`` (NaN); trackers keep the numbers."""

    def log(self, step: int, row: Mapping[str, Any]) -> None: ...

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        """The final figures of a run (``videorl eval run``: ``<benchmark>/overall`` and the rest)."""

    def close(self) -> None: ...


def numbers(row: Mapping[str, Any]) -> dict[str, float]:
    """The numeric values of ``row`` (step and time left out): what a tracker plots."""
    return {
        k: float(v)
        for k, v in row.items()
        if k not in ("step", "time") and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def _flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _requirement(line: str) -> tuple[str, str, str]:
    name, sep, version = line.partition("==")
    return name.strip(), sep, version.strip() or "unknown"


def _missing(package: str, extra: str, exc: ImportError) -> ConfigError:
    return ConfigError(f"the {extra} logger needs {package}: pip install 'videorl[{extra}]' ({exc})")


class LoggerUnavailable(VideorlError):
    """Raised by a logger's factory that cannot run here and is fine to go without (TensorBoard, on by
    default, without its library): reported as a warning and left out, the run goes on."""


# --- first-party loggers --------------------------------------------------------------------------


class JsonlLogger:
    """``<run_dir>/metrics.jsonl``: one JSON object per step, each line flushed and fsynced; a resumed run
    drops the lines after ``start_step`` (they are logged again), and one whose file ends before it is
    an error (metrics must be logged before each checkpoint)."""

    required = True

    def __init__(self, run: RunContext) -> None:

        self.path = run.run_dir / METRICS_FILE
        run.run_dir.mkdir(parents=True, exist_ok=True)
        kept = truncate_after(self.path, run.start_step)
        if run.start_step > 0 and (not kept or kept[-1]["step"] != run.start_step):
            last = kept[-1]["step"] if kept else 0
            raise VideorlError(
                f"{self.path} ends at step {last}, but the run resumes after step {run.start_step}: the "
                "metrics of the steps between are missing (metrics must be logged before each checkpoint)"
            )
        self._file: IO[str] | None = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def log(self, step: int, row: Mapping[str, Any]) -> None:
        if self._file is None:
            raise VideorlError(f"{self.path} is closed")
        self._file.write(json.dumps(dict(row)) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        """Nothing: an evaluation's summary is its results.json already."""

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class TensorBoardLogger:
    """Scalars under ``<run_dir>/tensorboard`` (``log_dir``: elsewhere); the config and run metadata as
    text. A resumed run hides the events of the steps logged again."""

    def __init__(self, run: RunContext, *, log_dir: str | None = None) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise LoggerUnavailable(
                f"TensorBoard logging is off: {exc} (pip install tensorboard, or leave tensorboard out of "
                "trainer.loggers)"
            ) from None
        purge = run.start_step + 1 if run.start_step > 0 else None
        self._tb = SummaryWriter(log_dir=log_dir or str(run.run_dir / TENSORBOARD_DIR), purge_step=purge)
        if run.start_step == 0:
            self._tb.add_text("config", f"```\n{json.dumps(run.config, indent=2)}\n```", 0)
            self._tb.add_text("run", f"```\n{json.dumps(run.metadata, indent=2)}\n```", 0)

    def log(self, step: int, row: Mapping[str, Any]) -> None:
        for name, value in numbers(row).items():
            self._tb.add_scalar(name, value, step)
        self._tb.flush()

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        for name, value in numbers(summary).items():
            self._tb.add_scalar(name, value, 0)
        self._tb.flush()

    def close(self) -> None:
        self._tb.close()


class WandbLogger:
    """Weights & Biases: one W&B run per run directory (a resumed run continues it), with the config and
    run metadata (plugin versions, git revision) as its config. Options go to ``wandb.init`` (``project``,
    ``entity``, ``mode: offline``, ``tags``, ``group``, ...); ``dir`` defaults to the run directory.
    W&B refuses steps below one it has seen, so the steps a resumed run logs again are kept only in
    ``metrics.jsonl``. A benchmark's ``bench/NAME/*`` metrics are plotted against ``bench/NAME/step``,
    the step whose weights they scored (benchmark workers log a pass in a later step's row)."""

    def __init__(self, run: RunContext, *, project: str = "videorl", **init: Any) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise _missing("wandb", "wandb", exc) from None
        run_id = run.tracker_id("wandb") or secrets.token_hex(4)  # W&B ids: [a-z0-9]
        init.setdefault("dir", str(run.run_dir))
        init.setdefault("name", run.name)
        init.setdefault("job_type", run.kind)
        self._run = wandb.init(
            project=project, id=run_id, resume="allow", config={"config": run.config, "run": run.metadata},
            reinit="create_new", **init,
        )  # fmt: skip
        run.tracker_id("wandb", run_id)
        self._benchmarks: set[str] = set()

    def log(self, step: int, row: Mapping[str, Any]) -> None:
        for key in row:
            name = key[len("bench/") : -len("/step")]
            if key.startswith("bench/") and key.endswith("/step") and name not in self._benchmarks:
                self._run.define_metric(f"bench/{name}/*", step_metric=key)
                self._benchmarks.add(name)
        self._run.log(numbers(row), step=step)

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        self._run.summary.update(numbers(summary))

    def close(self) -> None:
        self._run.finish()


class MlflowLogger:
    """MLflow through ``MlflowClient``: one MLflow run per run directory (a resumed run continues it) in
    ``experiment``, the config as params (flattened, ``model.path``), the versions and git revision as
    tags, ``config.json`` and ``run.json`` as artifacts; a character MLflow refuses in a metric name
    becomes ``_`` (``accuracy (pooled)`` → ``accuracy _pooled_``). ``tracking_uri``: e.g. ``sqlite:///mlflow.db``
    or a server (default: MLflow's, ``MLFLOW_TRACKING_URI``)."""

    def __init__(
        self,
        run: RunContext,
        *,
        tracking_uri: str | None = None,
        experiment: str = "videorl",
        artifact_location: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        try:
            from mlflow.entities import Param
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise _missing("mlflow", "mlflow", exc) from None
        self._client = MlflowClient(tracking_uri=tracking_uri)
        existing = self._client.get_experiment_by_name(experiment)
        experiment_id = (
            existing.experiment_id
            if existing is not None
            else self._client.create_experiment(experiment, artifact_location=artifact_location)
        )
        run_id = run.tracker_id("mlflow")
        if run_id is None:
            git = run.metadata.get("git") or {}
            all_tags = {
                "videorl.kind": run.kind,
                "videorl.version": str(run.metadata.get("videorl", "")),
                "mlflow.source.git.commit": str(git.get("revision", "")),
                "videorl.git_dirty": str(git.get("dirty", "")),
                **{f"plugin.{name}": version
                   for name, _, version in map(_requirement, run.metadata.get("requirements", []))},
                **(tags or {}),
            }  # fmt: skip
            created = self._client.create_run(experiment_id, run_name=run.name, tags=all_tags)
            run_id = created.info.run_id
            params = [Param(k, str(v)[:6000]) for k, v in _flat(run.config).items()]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 params a batch
                self._client.log_batch(run_id, params=params[i : i + 100])
            self._client.log_dict(run_id, run.config, "config.json")
            self._client.log_dict(run_id, run.metadata, "run.json")
            run.tracker_id("mlflow", run_id)
        else:
            self._client.update_run(run_id, status="RUNNING")
        self.run_id = run_id

    def _metrics(self, values: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(_MLFLOW_UNSAFE.sub("_", k), v, now, step) for k, v in values.items()]
        for i in range(0, len(metrics), 1000):  # MLflow takes at most 1000 metrics a batch
            self._client.log_batch(self.run_id, metrics=metrics[i : i + 1000])

    def log(self, step: int, row: Mapping[str, Any]) -> None:
        self._metrics(numbers(row), step)

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        self._metrics(numbers(summary), 0)

    def close(self) -> None:
        self._client.set_terminated(self.run_id)


# --- opening and fanning out ----------------------------------------------------------------------


def open_loggers(
    registry: Registry[Any],
    names: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    run: RunContext,
) -> dict[str, Logger]:
    """The loggers ``names`` (registered names), each made with ``options[name]``; one that cannot be
    made is a :class:`ConfigError` naming it (the loggers already open are closed), except one that
    raises :class:`LoggerUnavailable`: a warning, and the run goes without it."""
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise ConfigError(
            f"options given for loggers that are not enabled: {', '.join(unknown)} (enabled: "
            f"{', '.join(names)})"
        )
    opened: dict[str, Logger] = {}
    try:
        for name in names:
            try:
                logger = _open_within(
                    name, lambda n=name: registry.create(n, run=run, **dict(options.get(n) or {}))
                )
                if logger is not None:
                    opened[name] = logger
            except TypeError as exc:
                raise ConfigError(f"logger {name!r}: {exc}") from None
            except LoggerUnavailable as exc:
                warnings.warn(str(exc), RuntimeWarning, stacklevel=3)
    except BaseException:
        for logger in opened.values():
            logger.close()
        raise
    return opened


def _open_within(name: str, make: Any) -> Logger | None:
    """``make()`` run in a thread for at most :data:`TRACKER_DEADLINE` seconds (a tracker's server that
    does not answer blocks its factory); None, with a warning, when it has not returned by then."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["logger"] = make()
        except BaseException as exc:  # raised in the caller's thread below
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"videorl-logger-{name}-open", daemon=True)
    thread.start()
    thread.join(TRACKER_DEADLINE)
    if thread.is_alive():
        warnings.warn(
            f"logger {name!r} did not open within {TRACKER_DEADLINE:g} s; the run goes on without it",
            RuntimeWarning,
            stacklevel=4,
        )
        return None
    if "error" in box:
        raise box["error"]
    return box["logger"]


def parse_logger_options(items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``NAME.KEY=VALUE`` items (values read as YAML scalars) as ``{NAME: {KEY: value}}``."""
    import yaml

    options: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        name, dot, option = key.partition(".")
        if not (sep and dot and name and option):
            raise ConfigError(f"logger option {item!r}: expected NAME.KEY=VALUE (e.g. wandb.mode=offline)")
        options.setdefault(name, {})[option] = yaml.safe_load(value) if value else ""
    return options


def open_eval_loggers(
    registry: Registry[Any],
    names: Sequence[str],
    options: Mapping[str, Mapping[str, Any]],
    run_dir: Path,
    settings: Mapping[str, Any],
    requirements: Sequence[str],
) -> LoggerSet:
    """The loggers of ``videorl eval run --logger``: told the run's settings as config, and the
    versions (videorl, every plugin) and git revision as metadata."""
    import sys

    metadata = {
        "videorl": __version__,
        "git": git_revision(Path(__file__).resolve().parents[1]),
        "argv": list(sys.argv),
        "requirements": list(requirements),
    }
    run = RunContext(Path(run_dir), "eval", 0, json.loads(json.dumps(settings, default=str)), metadata)
    return LoggerSet(open_loggers(registry, names, options, run))


def summary_figures(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Benchmark summaries as one flat mapping: ``<benchmark>/overall``, ``<benchmark>/metrics/<name>``,
    ``<benchmark>/categories/<kind>/<value>``, ``<benchmark>/n``, ..."""
    out: dict[str, Any] = {}

    def walk(value: Any, name: str) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(item, f"{name}/{key}")
        elif not isinstance(value, (list, tuple)):
            out[name] = value

    for benchmark, summary in summaries.items():
        walk(summary, benchmark)
    return out


#: how long one call of a tracker (a step's row, the summary, closing) may take before it is abandoned
TRACKER_DEADLINE = 60.0
#: rows that may wait for a tracker that is slower than training, before it is abandoned
TRACKER_QUEUE = 256


class _TrackerThread:
    """A logger called from its own daemon thread through a bounded queue, so that the caller never waits
    on it: a call that raises, runs past the deadline, or finds the queue full ends the logger."""

    def __init__(self, name: str, logger: Logger, deadline: float) -> None:
        self.logger, self.deadline = logger, deadline
        self.calls: queue.Queue[tuple[str, Any] | None] = queue.Queue(maxsize=TRACKER_QUEUE)
        self.started: float | None = None  # when the call in progress began
        self.error: str | None = None  # "(what): Type: message" of the call that failed
        self.thread = threading.Thread(target=self._serve, name=f"videorl-logger-{name}", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while (item := self.calls.get()) is not None:
            what, call = item
            self.started = time.monotonic()
            try:
                call(self.logger)
            except Exception as exc:
                self.error = f"({what}): {type(exc).__name__}: {exc}"
                if what != "close":
                    with contextlib.suppress(Exception):  # already reported as failed
                        self.logger.close()
                return
            finally:
                self.started = None

    def stuck(self) -> str | None:
        """Why this logger is to be abandoned (it failed, or its call in progress is past the deadline)."""
        started = self.started
        if self.error is None and started is not None and time.monotonic() - started > self.deadline:
            return f"(a call): no answer within {self.deadline:g} s"
        return self.error

    def submit(self, what: str, call: Any) -> str | None:
        """Queue ``call``; why the logger is abandoned instead, if it is."""
        reason = self.stuck()
        if reason is None and not self.thread.is_alive():
            reason = f"({what}): its thread ended"
        if reason is not None:
            return reason
        try:
            self.calls.put_nowait((what, call))
        except queue.Full:
            return f"({what}): {TRACKER_QUEUE} rows wait for it, it has not answered for a while"
        return None

    def finish(self) -> str | None:
        """Close the logger, waiting at most the deadline for what is queued; why it was abandoned."""
        reason = self.submit("close", lambda logger: logger.close())
        with contextlib.suppress(queue.Full):
            self.calls.put_nowait(None)
        self.thread.join(self.deadline)
        if reason is None and self.thread.is_alive():
            reason = f"(close): no answer within {self.deadline:g} s"
        return reason or self.error


class LoggerSet:
    """Sends a row or a summary to every logger. A ``required`` one (``jsonl``) is called here and fails
    the run when it fails; every other one runs in its own thread (:class:`_TrackerThread`), and one that
    fails or stops answering within ``deadline`` seconds is reported (a warning naming it and the call)
    and left out from then on: training never waits on a tracker."""

    def __init__(self, loggers: Mapping[str, Logger], *, deadline: float | None = None) -> None:
        self.loggers = dict(loggers)
        self.failed: dict[str, str] = {}
        wait = TRACKER_DEADLINE if deadline is None else deadline
        self._threads = {
            name: _TrackerThread(name, logger, wait)
            for name, logger in self.loggers.items()
            if not getattr(logger, "required", False)
        }

    def _each(self, what: str, call: Any) -> None:
        for name, logger in list(self.loggers.items()):
            worker = self._threads.get(name)
            if worker is None:
                call(logger)  # required: its failure is the run's
                continue
            reason = worker.finish() if what == "close" else worker.submit(what, call)
            if reason is not None:
                self._abandon(name, reason)

    def _abandon(self, name: str, reason: str) -> None:
        """Report logger ``name`` as failed (``reason``: "(call): why") and leave it out."""
        self.failed[name] = reason.split("): ", 1)[-1]
        del self.loggers[name]
        self._threads.pop(name, None)
        warnings.warn(
            f"logger {name!r} failed {reason}; it is off for the rest of the run, which goes on",
            RuntimeWarning,
            stacklevel=4,
        )

    def log(self, step: int, row: Mapping[str, Any]) -> None:
        self._each(f"step {step}", lambda logger: logger.log(step, row))

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        self._each("summary", lambda logger: logger.log_summary(summary))

    def close(self) -> None:
        self._each("close", lambda logger: logger.close())
        self.loggers.clear()
