"""Compose an evaluation run from an :class:`~videorl.eval.config.EvalConfig` and the installed plugins.

As :mod:`videorl.train.compose` does for training, this is where evaluation looks components up by
name: the benchmarks, the model backend (from the checkpoint's ``model_type``), the rollout engine
(through training's :func:`~videorl.rollout.factory.make_engine`), the workflow and its tools
(``rollout.workflow``, through training's :func:`~videorl.rollout.factory.make_workflow`) and the
loggers. Everything that can
fail on the data is checked before the run directory is touched: every benchmark's rows are loaded
first, and ``results.json`` refuses a resume with other settings before the model loads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.actor.lora import export_policy, is_adapter_folder, merged_adapter_model
from videorl.errors import ConfigError, UnknownComponentError, VideorlError
from videorl.generation import capabilities_of
from videorl.hub import resolve_model
from videorl.rollout import SamplingParams
from videorl.runs.checkpoint import CHECKPOINT_DIR
from videorl.runs.export import EXPORT_MARKER, base_model_of, resolve_checkpoint
from videorl.runs.manifest import STATE_FILE
from videorl.runs.records import CONFIG_FILE
from videorl.runs.trackers import open_eval_loggers, summary_figures

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.eval.agent import AgentRollout
    from videorl.eval.config import EvalConfig
    from videorl.eval.inputs import RowInputs
    from videorl.eval.pipeline import EvalTask, RunReport
    from videorl.plugins import Plugins
    from videorl.rollout import RolloutEngine

__all__ = ["Evaluation", "benchmark_dirs", "build_evaluation", "engine_identity", "make_eval_engine"]


@dataclass
class Evaluation:
    """An evaluation ready to run: its benchmarks, model, inputs, sampling and recorded settings."""

    config: EvalConfig
    run_dir: Path
    tasks: list[EvalTask]
    model: Path  # the model directory (a training run's checkpoint exported into the run directory)
    inputs: RowInputs
    sampling: SamplingParams
    settings: dict[str, Any]
    agent: AgentRollout | None = None  # rows answered through a workflow (rollout.workflow)

    def run(self, plugins: Plugins) -> RunReport:
        """Start the engine (and the loggers), evaluate every benchmark, close them."""
        from videorl.eval.pipeline import Evaluator
        from videorl.eval.results import begin_run

        c = self.config
        trackers = (
            open_eval_loggers(plugins.loggers, c.loggers, c.logger_options, self.run_dir, self.settings,
                              plugins.requirements()) if c.loggers else None
        )  # fmt: skip
        engine = make_eval_engine(c, plugins, self.inputs.backend, self.model)
        try:
            p = c.pipeline
            wait = {} if p.batch_wait is None else {"batch_wait": p.batch_wait}
            evaluator = Evaluator(
                self.inputs, engine, self.sampling, workers=p.workers, batch_size=p.batch_size,
                queue_size=p.queue_size, agent=self.agent, **wait,
            )  # fmt: skip
            begin_run(self.run_dir, {**self.settings, "pipeline": evaluator.describe()})
            report = evaluator.run(self.tasks, self.run_dir, progress=not c.quiet)
            if trackers is not None:
                trackers.log_summary(summary_figures({n: r.summary for n, r in report.results.items()}))
            return report
        finally:
            engine.close()
            if trackers is not None:
                trackers.close()


def benchmark_dirs(specs: list[str], data_root: Path | None) -> list[tuple[str, Path]]:
    """``(name, directory)`` per ``NAME[=DIR]`` of ``benchmarks``.

    ``DIR`` is taken relative to ``data_root``; without it the benchmark's directory is
    ``DATA_ROOT/NAME`` when that exists, else ``DATA_ROOT`` itself (one benchmark only).
    """
    out = []
    for spec in specs:
        name, sep, directory = spec.partition("=")
        if sep:
            path = Path(directory).expanduser()
            out.append((name, path if path.is_absolute() or data_root is None else data_root / path))
            continue
        if data_root is None:
            raise ConfigError(f"--benchmark {name}: give --data-root DIR or --benchmark {name}=DIR")
        if (data_root / name).is_dir() or len(specs) > 1:
            out.append((name, data_root / name))
        else:
            out.append((name, data_root))
    return out


def engine_identity(config: EvalConfig, plugins: Plugins) -> dict[str, Any]:
    """What identifies the engine in the results: its registered name and dtype, and for an engine on
    this process's device (``own_devices=False``, as ``hf``) that device and the dtype ``auto`` stands
    for there. An unregistered ``engine.name`` is a :class:`ConfigError` with the closest names."""
    import torch

    e = config.engine
    try:
        name = plugins.rollout_engines.canonical(e.name)
    except UnknownComponentError as exc:
        raise ConfigError(f"engine.name (--engine): {exc}") from None
    if capabilities_of(plugins.rollout_engines.get(name)).own_devices:
        return {"name": name, "dtype": e.dtype}
    device = e.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = e.dtype if e.dtype != "auto" else ("bfloat16" if device.startswith("cuda") else "float32")
    return {"name": name, "dtype": dtype, "device": device}


def max_model_len(config: EvalConfig) -> int:
    """vLLM's context length: ``engine.max_model_len``, else derived as training derives its own
    (:func:`videorl.rollout.factory.max_model_len`): the longest prompt training takes at this visual
    budget (``data.max_prompt_length``, whose default fits every family's default budget with its
    text) and the longest response (``sampling.max_tokens``). vLLM's own default, the model's full
    context (128k tokens for Qwen2.5-VL), reserves KV cache for sequences no prompt reaches."""
    if config.engine.max_model_len is not None:
        return config.engine.max_model_len
    return config.data._budget().max_prompt_length + config.sampling.max_tokens


def make_eval_engine(
    config: EvalConfig, plugins: Plugins, backend: ModelBackend, model: Path
) -> RolloutEngine:
    """The engine, built as training builds its own (:func:`videorl.rollout.factory.make_engine`): the
    registered ``engine.name``, or the variant of it that takes prompts one by one (``submit``) where it
    declares one (vLLM's ``AsyncLLM``, registered as ``vllm-async``) and no workflow generates turn by
    turn (``rollout.workflow``: batched ``generate``)."""
    from videorl.rollout.factory import make_engine

    e, identity = config.engine, engine_identity(config, plugins)
    variant = capabilities_of(plugins.rollout_engines.get(identity["name"])).async_variant
    name = variant if variant and config.rollout.workflow is None else identity["name"]
    return make_engine(
        plugins, name, backend, model_path=str(model), dtype=identity["dtype"], seed=config.sampling.seed,
        device=identity.get("device"), max_model_len=max_model_len(config),
        max_batch_prompts=config.pipeline.batch_size, max_num_batched_tokens=e.max_num_batched_tokens,
    )  # fmt: skip


def _local_model(model: str) -> Path:
    """``model.path`` as a local path: a Hub id resolved from the cache (:mod:`videorl.hub`), else the
    path, which must exist."""

    local = resolve_model(model)
    if not local.exists():
        raise ConfigError(f"model.path (--model): {model}: no such folder")
    return local


def _model_dir(model: Path, run_dir: Path, echo: Callable[[str], None], backends: Any) -> Path:
    """``model`` as a model directory. A training run (its latest undamaged checkpoint) or one of its
    checkpoints is exported first, as ``videorl export`` does, to ``RUN/model``; a later call with the
    same checkpoint reuses that export, and one with another checkpoint is refused for a run that
    already has results (its predictions came from the first). A PEFT adapter folder is merged into its
    base model there (:func:`videorl.actor.lora.merged_adapter_model`)."""

    if is_adapter_folder(model):
        return merged_adapter_model(model, run_dir, backends, echo)
    if (model / "config.json").is_file() or not any(
        (model / name).exists() for name in (CHECKPOINT_DIR, CONFIG_FILE, STATE_FILE)
    ):
        return model  # a model directory, or something the backend lookup explains
    checkpoint = resolve_checkpoint(model).resolve()
    target = run_dir / "model"
    marker = target / EXPORT_MARKER
    exported = json.loads(marker.read_text(encoding="utf-8")).get("source") if marker.is_file() else None
    if exported == str(checkpoint):
        return target
    if exported is not None and (run_dir / "results.json").is_file():
        raise VideorlError(
            f"{run_dir} holds results of {exported}, not of {checkpoint}: evaluate it into another --out"
        )
    export_policy(checkpoint, base_model_of(checkpoint), target, backends, overwrite=True)  # LoRA: merged
    echo(f"--model {model}: exported {checkpoint} to {target} (videorl export {checkpoint} {target})")
    return target


def make_eval_agent(config: EvalConfig, plugins: Plugins, sampling: SamplingParams) -> AgentRollout | None:
    """The workflow ``rollout.workflow`` answers rows with (None: one response per row), made as
    training makes it; an unknown workflow or tool is a :class:`ConfigError` naming the closest."""
    from videorl.eval.agent import agent_base, make_agent

    r = config.rollout
    if r.workflow is None:
        return None
    base = agent_base(r.workflow, r)
    return make_agent(plugins, r.workflow, base, sampling, key="rollout.workflow (--workflow)")


def build_evaluation(
    config: EvalConfig, plugins: Plugins, *, echo: Callable[[str], None] = print
) -> Evaluation:
    """The benchmarks' rows, the model, its inputs at the configured budget and the run's settings,
    written into ``results.json`` (refused when the run directory was evaluated with other ones).
    ``echo`` tells of a training checkpoint exported for evaluation."""
    from videorl.backend import backend_for_model
    from videorl.eval.inputs import RowInputs, visual_params
    from videorl.eval.pipeline import load_task
    from videorl.eval.results import begin_run, run_settings
    from videorl.media import MediaCache

    engine = engine_identity(config, plugins)  # an unknown engine stops the run before anything loads
    s = config.sampling
    sampling = SamplingParams(n=1, temperature=s.temperature, max_tokens=s.max_tokens, seed=s.seed)
    agent = make_eval_agent(config, plugins, sampling)  # an unknown workflow or tool, too
    run_dir = Path(config.output_dir)
    data_root = Path(config.data_root) if config.data_root else None
    tasks = [load_task(plugins.benchmarks, name, root, limit=config.limit)
             for name, root in benchmark_dirs(config.benchmarks, data_root)]  # fmt: skip
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise ConfigError(f"a benchmark is given twice: {', '.join(names)}")
    model = _model_dir(_local_model(config.model.path), run_dir, echo, plugins.model_backends)
    backend = backend_for_model(model, plugins.model_backends)
    video, image = visual_params(backend, config.data.visual_budget(backend.budget))
    cache_dir = config.data.cache_dir or run_dir / "frame-cache"
    cache = MediaCache(cache_dir, strict_params=False, threads=1)  # one decoder thread per loader
    inputs = RowInputs(backend, cache, video, image, thinking=config.data.thinking)
    p = config.pipeline
    settings = run_settings(
        inputs, sampling, model=model, engine=engine, requirements=plugins.requirements(),
        tasks=tasks, limit=config.limit,
        pipeline={"workers": p.workers, "batch_size": p.batch_size, "queue_size": p.queue_size},
    )  # fmt: skip
    if agent is not None:
        settings["workflow"] = agent.settings()
    begin_run(run_dir, settings)  # refuses to resume a run made with other settings, before loading the model
    return Evaluation(config, run_dir, tasks, model, inputs, sampling, settings, agent)
