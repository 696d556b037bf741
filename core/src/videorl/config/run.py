"""The run's own sections of the training schema: ``trainer`` (steps, saving, validation, logging,
benchmarks during training) and ``ray`` (worker groups and their placement)."""

# ruff: noqa: RUF009 - option() returns dataclasses.field(...), with the help text in its metadata
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from videorl.option import Problems, option


@dataclass
class BenchmarkConfig:
    """One benchmark scored during training (an item of ``trainer.benchmarks``)."""

    name: str = option("", "A registered benchmark (videorl plugins lists them). Required.")
    data_root: str = option("", "The benchmark's directory (its official files). Required.")
    every: int = option(0, "A pass every N steps, and one after the last step; 0: after the last only.")
    limit: int | None = option(None, "Only the first N rows (after ids); null: all.")
    ids: list[str] = option(factory=list, help="Only these row ids (a fixed subset); []: every row.")
    max_tokens: int = option(1024, "Most tokens per response.")
    temperature: float = option(0.0, "Sampling temperature; 0: greedy.")
    thinking: bool | None = option(None, "The thinking prompt variant; null: data.thinking.")
    workflow: str | None = option(
        None,
        "Answer each row through this registered rollout workflow (tool_agent: with the run's "
        "rollout.tools and budgets, max_tokens the whole episode's); null: one response per row.",
    )

    def _problems(self) -> Problems:
        problems: Problems = []
        for key in ("name", "data_root"):
            if not getattr(self, key).strip():
                problems.append((key, "is required"))
        if self.every < 0:
            problems.append(("every", "must be >= 0"))
        if self.limit is not None and self.limit < 1:
            problems.append(("limit", "must be >= 1"))
        if self.max_tokens < 1:
            problems.append(("max_tokens", "must be >= 1"))
        if not self.temperature >= 0:
            problems.append(("temperature", "must be >= 0"))
        if len(set(self.ids)) != len(self.ids):
            problems.append(("ids", "names a row id twice"))
        return problems


@dataclass
class TrainerConfig:
    max_steps: int = option(200, "Training steps (one step = one rollout batch and its updates).")
    save_every: int = option(
        20, "Write a checkpoint every N steps (and after the last); 0: only after the last."
    )
    keep_last: int = option(5, "Checkpoints kept (older ones are deleted); 0: keep all.")
    resume: str | None = option(
        None,
        "auto: continue from the last complete checkpoint of output_dir; a checkpoint directory; null: start "
        "fresh.",
    )
    val_every: int = option(0, "Score data.val_files every N steps; 0: never.")
    loggers: list[str] = option(
        factory=lambda: ["jsonl", "tensorboard"],
        help="Where each step's metrics go: registered loggers (jsonl, tensorboard, wandb, mlflow, a "
        "plugin's); "
        "jsonl (output_dir/metrics.jsonl, read by resume and videorl plot) is required.",
    )
    logger_options: dict[str, dict[str, Any]] = option(
        factory=dict,
        help="Options per logger, e.g. {wandb: {project: p, mode: offline}, mlflow: {tracking_uri: sqlite:///m.db}}.",
    )
    progress_bar: bool = option(True, "Show a progress bar with step, reward and ETA.")
    log_completions: int = option(
        0,
        "Sampled responses of each step written to output_dir/completions.jsonl (one per prompt first); 0: "
        "none.",
    )
    benchmarks: list[BenchmarkConfig] = option(
        factory=list,
        help="Benchmarks scored with the current weights through the rollout engine, as videorl eval run "
        "scores "
        "them, into output_dir/benchmarks/ and the bench/* metrics: a list of {name, data_root, every, "
        "limit, "
        "ids, max_tokens, temperature, thinking, workflow} (docs/training.md, Benchmarks during training).",
    )
    benchmarks_strict: bool = option(
        False,
        "A benchmark that fails (its data, a sample, its adapter) stops the run; false: logged, run goes on.",
    )
    max_staleness: int = option(
        0,
        "Asynchronous training (Ray, placement split): the rollout workers generate up to k steps ahead of "
        "the update, so a batch is trained on by a policy at most k versions newer than the one that "
        "generated it; 0: synchronous (docs/async.md).",
    )

    def _problems(self) -> Problems:
        problems: Problems = []
        if self.max_steps < 1:
            problems.append(("max_steps", "must be >= 1"))
        for key in ("save_every", "keep_last", "val_every", "log_completions", "max_staleness"):
            if getattr(self, key) < 0:
                problems.append((key, "must be >= 0"))
        for i, bench in enumerate(self.benchmarks):
            problems += [(f"benchmarks[{i}].{key}", message) for key, message in bench._problems()]
        names = [b.name for b in self.benchmarks]
        if len(set(names)) != len(names):
            problems.append(("benchmarks", f"names a benchmark twice: {names}"))
        if "jsonl" not in self.loggers:
            problems.append(
                ("loggers", "must include jsonl (metrics.jsonl is what resume and videorl plot read)")
            )
        if len(set(self.loggers)) != len(self.loggers):
            problems.append(("loggers", f"names a logger twice: {self.loggers}"))
        unknown = sorted(set(self.logger_options) - set(self.loggers))
        if unknown:
            problems.append(
                ("logger_options", f"options for loggers not in trainer.loggers: {', '.join(unknown)}")
            )
        return problems


@dataclass
class RayConfig:
    """``videorl train CONFIG --ray``: a single controller and worker groups on a Ray cluster."""

    placement: Literal["colocated", "split"] = option(
        "colocated",
        "colocated: each actor worker also hosts a rollout engine (and the reference model when the KL "
        "penalty is on) on the same devices; split: rollout engines and reference models in worker groups "
        "of their own, with their own devices.",
    )
    actor_workers: int = option(
        1,
        "FSDP actor workers (ranks), in data groups of actor.sequence_parallel_size; "
        "data.rollout_batch_size must be a multiple of the groups.",
    )
    rollout_workers: int | None = option(
        None,
        "Rollout engine workers with placement split; "
        "null: one per data group (ray.actor_workers / actor.sequence_parallel_size).",
    )
    reference_workers: int | None = option(
        None,
        "Reference-model workers with placement split and the KL penalty on; "
        "null: one per data group (ray.actor_workers / actor.sequence_parallel_size).",
    )
    reward_workers: int = option(
        1, "Reward workers (CPU only); the responses of a step are shared among them."
    )
    gpus_per_worker: float | None = option(
        None, "GPUs of each actor, rollout and reference worker; null: 1 when the cluster has GPUs, else 0."
    )
    rollout_gpus_per_worker: float | None = option(
        None,
        "GPUs of each split rollout worker (e.g. 2 for a tensor-parallel-2 engine); null: gpus_per_worker.",
    )
    benchmark_workers: int = option(
        0,
        "Workers of their own for the trainer.benchmarks passes, each with a rollout engine and a copy of "
        "the weights of the pass's step, so the update goes on while a pass runs; 0: the rollout workers "
        "answer the passes between two steps (docs/training.md, Benchmarks during training).",
    )
    benchmark_gpus_per_worker: float | None = option(
        None,
        "GPUs of each benchmark worker (its engine's tensor_parallel_size); null: rollout_gpus_per_worker if "
        "set, else gpus_per_worker times the engine's tensor_parallel_size.",
    )
    cpus_per_worker: float = option(1.0, "CPUs reserved for each worker in its placement-group bundle.")
    address: str | None = option(
        None, "Ray cluster to join (HOST:PORT, or auto); null: start a local Ray runtime on this machine."
    )
    dashboard: bool = option(
        False, "Start Ray's dashboard with a local runtime (listening on 127.0.0.1 only)."
    )
    auth: Literal["token", "disabled"] = option(
        "token",
        "Token authentication (Ray's RAY_AUTH_MODE) of a local runtime; joining a cluster, token presents "
        "this machine's token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token) where there is one.",
    )
    worker_start_timeout: float = option(
        600.0, "Seconds to wait for the placement groups and workers to start."
    )

    def _problems(self) -> Problems:
        problems: Problems = []
        for key in ("actor_workers", "reward_workers"):
            if getattr(self, key) < 1:
                problems.append((key, "must be >= 1"))
        for key in ("rollout_workers", "reference_workers"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                problems.append((key, "must be >= 1 (or null)"))
        if self.benchmark_workers < 0:
            problems.append(("benchmark_workers", "must be >= 0"))
        for key in ("gpus_per_worker", "rollout_gpus_per_worker", "benchmark_gpus_per_worker"):
            if (getattr(self, key) or 0) < 0:
                problems.append((key, "must be >= 0"))
        if self.cpus_per_worker <= 0:
            problems.append(("cpus_per_worker", "must be > 0"))
        return problems
