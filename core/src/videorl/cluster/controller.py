"""The controller of a Ray run: the GRPO step of :mod:`videorl.train.grpo`, driving worker groups.

The controller holds the data order of every actor rank (as each torchrun rank would), the run's
metrics and progress, and decides everything between the workers' calls. One step:

1. rollout    each rank's share of the prompts goes, as sample ids, to a rollout worker, which
              encodes the prompts from the frame cache and generates; reward workers score the
              responses; dynamic sampling and mix-policy decide as in one process
              (:func:`videorl.train.grpo.collect_groups`). The ranks' shares run at once, a thread each;
2. advantage  group-normalised here;
3. reference  split placement with the KL penalty: reference workers return per-token log-probs;
4. update     every actor rank runs :func:`videorl.train.grpo.update` on its share (FSDP between them);
5. sync       colocated: each worker refreshes its own engine; split: actor rank 0 puts the weights in
              Ray's object store and every rollout worker loads them;
6. metrics    averaged over the ranks as under torchrun; a checkpoint every ``save_every`` steps, the
              same files a torchrun run writes.

Only sample ids, token ids and numbers cross between the controller and the workers
(:mod:`videorl.cluster.wire`); ``ray/*_bytes_per_sample`` metrics report how many.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.cluster import wire
from videorl.cluster.runtime import Cluster, WorkerFailure, WorkerHandle, cpus_needed, start_ray
from videorl.errors import ConfigError, VideorlError

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.config import TrainConfig
    from videorl.data import Sample
    from videorl.plugins import Plugins
    from videorl.train.data import TrainData
    from videorl.train.grpo import Scorer, StageTimer, Trajectory
    from videorl.train.metrics import MetricsWriter, ProgressBar

WORKERS_FILE = "ray-workers.json"


class Controller:
    """Drives ``cluster``'s workers through ``config.trainer.max_steps`` GRPO steps."""

    def __init__(
        self,
        config: TrainConfig,
        cluster: Cluster,
        backend: ModelBackend,
        data: list[TrainData],
        validation: list[Sample],
        canonical: Callable[[str], str] | None = None,
    ) -> None:
        """``canonical``: the spelling of a problem type in metrics (the router's ``canonical_type``)."""
        self.config, self.cluster, self.backend = config, cluster, backend
        self.data, self.validation = data, validation
        self.canonical = canonical
        self.step = 0
        self._bytes: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    # --- calls -------------------------------------------------------------------------------------

    def _call(self, stage: str, calls: Sequence[tuple[WorkerHandle, str, bytes]]) -> list[bytes]:
        """Send each worker its message; count the bytes both ways."""
        replies = self.cluster.call(
            stage, self.step, [(w, method, (message,)) for w, method, message in calls]
        )
        with self._lock:
            self._bytes["sent"] += sum(len(m) for _, _, m in calls)
            self._bytes["received"] += sum(len(r) for r in replies)
        return replies

    def scorer(self, split: str) -> Scorer:
        """A :data:`~videorl.train.grpo.Scorer` on the reward workers for samples of ``split`` (train or val):
        the responses are shared among the workers."""

        def score(trajectories: Sequence[Trajectory]) -> None:
            if not trajectories:
                return
            workers = self.cluster.rewards
            items = [
                [t.prompt.sample.id, wire.media_out(t.prompt.media), t.completion.token_ids]
                for t in trajectories
            ]
            size = -(-len(items) // len(workers))
            chunks = [items[i : i + size] for i in range(0, len(items), size)]
            calls = [(w, "score", wire.dumps({"split": split, "items": c})) for w, c in zip(workers, chunks)]
            scored = [row for reply in self._call("reward scoring", calls) for row in wire.loads(reply)]
            for t, (reward, parts) in zip(trajectories, scored, strict=True):
                t.reward, t.parts = float(reward), {k: float(v) for k, v in parts.items()}

        return score

    def _generate(
        self, rank: int, split: str, samples: Sequence[Sample], seed: int | None, timer: StageTimer
    ) -> tuple[list[Any], list[list[Any]]]:
        """Rank ``rank``'s rollout worker generates for ``samples`` of ``split`` (greedy without a
        ``seed``): their prompts (sample and media metadata; encoded on the worker) and completions."""
        from videorl.train.data import Prompt

        worker = self.cluster.rollouts[rank % len(self.cluster.rollouts)]
        message = wire.dumps(
            {
                "split": split,
                "step": self.step,
                "ids": [s.id for s in samples],
                "seed": seed,
                "greedy": seed is None,
            }
        )
        reply = wire.loads(self._call("rollout", [(worker, "generate", message)])[0])
        _add_seconds(timer, reply["seconds"])
        prompts = [Prompt(s, None, wire.media_in(m)) for s, m in zip(samples, reply["media"], strict=True)]
        return prompts, [[wire.completion_in(c) for c in group] for group in reply["completions"]]

    def _rollout(self, rank: int, timer: StageTimer) -> Callable[[list[Sample], int, int], Any]:
        """A :data:`~videorl.train.grpo.Rollout` for rank ``rank`` on the workers."""
        from videorl.train.grpo import finish_groups

        def rollout(samples: list[Sample], seed: int, first_group: int) -> Any:
            prompts, outputs = self._generate(rank, "train", samples, seed, timer)
            return finish_groups(
                self.config,
                prompts,
                outputs,
                self.scorer("train"),
                self.backend,
                first_group=first_group,
                timer=timer,
            )

        return rollout

    # --- the step ----------------------------------------------------------------------------------

    def _collect(self, rank: int, step: int, timer: StageTimer) -> tuple[list[Trajectory], dict[str, float]]:
        from videorl.train.grpo import assign_advantages, collect_groups

        per_rank = max(1, self.config.data.rollout_batch_size // len(self.cluster.actors))
        groups, extra = collect_groups(
            self.config, step, per_rank, self.data[rank], self._rollout(rank, timer), rank
        )
        return assign_advantages(self.config, groups), extra

    def _reference(self, shares: list[list[Trajectory]], timers: list[StageTimer]) -> None:
        """Split placement, KL on: each share's reference log-probs from a reference worker."""
        workers = self.cluster.references
        calls = [
            (
                workers[r % len(workers)],
                "reference_logprobs",
                wire.dumps({"step": self.step, "items": _items(share)}),
            )
            for r, share in enumerate(shares)
        ]
        for share, timer, reply in zip(shares, timers, self._call("reference forward", calls)):
            out = wire.loads(reply)
            _add_seconds(timer, out["seconds"])
            for t, logprobs in zip(share, out["logprobs"], strict=True):
                t.ref_logprobs = logprobs

    def _update(
        self, step: int, shares: list[list[Trajectory]], timers: list[StageTimer]
    ) -> list[dict[str, float]]:
        calls = [
            (a, "update", wire.dumps({"step": step, "items": _items(share)}))
            for a, share in zip(self.cluster.actors, shares)
        ]
        metrics = []
        for timer, reply in zip(timers, self._call("actor update", calls)):
            out = wire.loads(reply)
            _add_seconds(timer, out["seconds"])
            metrics.append(out["metrics"])
        return metrics

    def _sync_weights(self) -> float:
        """Split placement: publish the actor's weights, load them into every rollout engine; their bytes."""
        published = self.cluster.call(
            "weight sync", self.step, [(a, "publish_weights", ()) for a in self.cluster.actors]
        )
        ref, size = published[0]
        self.cluster.call(
            "weight sync", self.step, [(w, "load_weights", (ref,)) for w in self.cluster.rollouts]
        )
        return float(size)

    def _validate(self, rank: int) -> dict[str, float]:
        from videorl.train.grpo import StageTimer, validation_metrics

        shard = self.validation[rank :: len(self.cluster.actors)]
        if not shard:
            return {}
        prompts, outputs = self._generate(rank, "val", shard, None, StageTimer())
        return validation_metrics(prompts, outputs, self.scorer("val"), self.canonical)

    def step_once(self, step: int, pool: ThreadPoolExecutor) -> dict[str, float]:
        """One GRPO step over the workers; the step's metrics, averaged over the ranks as torchrun does."""
        from videorl.train.distributed import mean_over_ranks
        from videorl.train.grpo import StageTimer, step_metrics

        config, ranks = self.config, range(len(self.cluster.actors))
        split = not self.cluster.colocated
        self.step, self._bytes = step, defaultdict(int)
        step_start = time.perf_counter()
        timers = [StageTimer() for _ in ranks]
        collected = _all(pool, [partial(self._collect, r, step, timers[r]) for r in ranks])
        shares = [share for share, _ in collected]
        if split and config.algorithm.use_kl_loss:
            self._reference(shares, timers)
        actor_metrics = self._update(step, shares, timers)
        weight_bytes = 0.0
        if split:
            with timers[0]("weight_sync"):
                weight_bytes = self._sync_weights()
        every = config.trainer.val_every
        validation: list[dict[str, float]] = [{} for _ in ranks]
        if self.validation and every and (step % every == 0 or step == config.trainer.max_steps):
            started = time.perf_counter()
            validation = _all(pool, [partial(self._validate, r) for r in ranks])
            for timer in timers:
                timer.seconds["validation"] += time.perf_counter() - started
        per_rank = []
        for r in ranks:
            timers[r].seconds["step"] = time.perf_counter() - step_start
            per_rank.append(
                {
                    **step_metrics(shares[r], canonical=self.canonical),
                    **actor_metrics[r],
                    **collected[r][1],
                    **validation[r],
                    **{f"time/{k}": v for k, v in timers[r].seconds.items()},
                }
            )
        metrics = mean_over_ranks(per_rank)
        samples = max(1, config.data.rollout_batch_size)
        metrics["ray/sent_bytes_per_sample"] = self._bytes["sent"] / samples
        metrics["ray/received_bytes_per_sample"] = self._bytes["received"] / samples
        if split:
            metrics["ray/weight_sync_bytes"] = weight_bytes
        return metrics

    def run(
        self,
        start: int,
        metrics_writer: MetricsWriter | None,
        progress: ProgressBar | None,
        on_step: Callable[[int, dict[str, float]], None] | None = None,
    ) -> int:
        """Steps ``start + 1`` to ``trainer.max_steps``: log, report and checkpoint each; the last step."""
        from videorl.train.checkpoint import checkpoint_due

        config = self.config
        pool = ThreadPoolExecutor(max_workers=len(self.cluster.actors), thread_name_prefix="videorl-rank")
        try:
            if not self.cluster.colocated and start > 0:
                self.step = start
                self._sync_weights()  # the engines hold the base model; the actor resumed
            for step in range(start + 1, config.trainer.max_steps + 1):
                metrics = self.step_once(step, pool)
                if metrics_writer is not None:
                    metrics_writer.log(step, metrics)
                if progress is not None:
                    progress.update(
                        step, reward=metrics.get("reward/overall"), acc=metrics.get("accuracy/overall", 0.0)
                    )
                if on_step is not None:
                    on_step(step, metrics)
                if checkpoint_due(step, config.trainer.save_every, config.trainer.max_steps):
                    self.cluster.call(
                        "checkpoint",
                        step,
                        [
                            (a, "save_checkpoint", (step, self.data[r].state_dict()))
                            for r, a in enumerate(self.cluster.actors)
                        ],
                    )
        finally:
            pool.shutdown(wait=False, cancel_futures=True)  # after a failure the workers are ended next
        return config.trainer.max_steps


def _add_seconds(timer: StageTimer, seconds: dict[str, float]) -> None:
    """Add the stage times a worker measured to this rank's ``timer``."""
    for stage, value in seconds.items():
        timer.seconds[stage] += value


def _all(pool: ThreadPoolExecutor, tasks: Sequence[Callable[[], Any]]) -> list[Any]:
    """Run ``tasks`` at once (one rank each); their results in order, or the first failure as it happens."""
    futures = [pool.submit(task) for task in tasks]
    done, _ = wait(futures, return_when=FIRST_EXCEPTION)
    for future in done:
        error = future.exception()
        if error is not None:
            raise error
    return [f.result() for f in futures]


def absolute_paths(config: TrainConfig) -> TrainConfig:
    """``config`` with every path made absolute against this directory: workers on other nodes start
    elsewhere."""

    def absolute(path: str | None) -> str | None:
        return None if path is None else str(Path(path).expanduser().absolute())

    d, template = config.data, config.data.prompt_template
    if template is not None and not (template.endswith(".jinja") or Path(template).is_file()):
        template = None  # the name of a registered template, not a path
    data = replace(
        d,
        train_files=[str(absolute(f)) for f in d.train_files],
        val_files=[str(absolute(f)) for f in d.val_files],
        cache_dir=absolute(d.cache_dir),
        media_root=absolute(d.media_root),
        prompt_template=absolute(template) if template is not None else d.prompt_template,
    )
    model_path = Path(config.model.path)
    model = replace(
        config.model, path=str(model_path.absolute()) if model_path.exists() else config.model.path
    )
    resume = config.trainer.resume
    trainer = replace(config.trainer, resume=absolute(resume) if resume not in (None, "auto") else resume)
    return replace(
        config, output_dir=str(absolute(config.output_dir)), data=data, model=model, trainer=trainer
    )


def _items(share: Sequence[Trajectory]) -> list[list[Any]]:
    """A rank's trajectories for the actor and reference workers (they encode the prompts themselves)."""
    return [
        [
            t.prompt.sample.id,
            t.group,
            wire.completion_out(t.completion),
            t.offline,
            t.advantage,
            t.ref_logprobs,
        ]
        for t in share
    ]


def train_on_ray(
    config: TrainConfig,
    plugins: Plugins,
    *,
    address: str | None = None,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
) -> int:
    """Train as ``config`` says with a controller here and worker groups on Ray; the last step done.

    Everything that can be checked without the workers is checked first (datasets, rewards, the frame
    cache in ``preprocessed_only`` mode, the checkpoint to resume), then Ray is started or joined.
    """
    import ray

    from videorl.atomic import atomic_write_text
    from videorl.rewards.router import RewardRouter
    from videorl.train.compose import load_datasets, make_backend, make_encoder, open_checkpoints
    from videorl.train.data import TrainData
    from videorl.train.metrics import MetricsWriter, ProgressBar, write_run_metadata

    config = absolute_paths(config)
    workers = config.ray.actor_workers
    if config.data.rollout_batch_size % workers:
        raise ConfigError(
            f"data.rollout_batch_size ({config.data.rollout_batch_size}) must be a multiple of ray.actor_workers "
            f"({workers}): each actor rank takes the same share of the prompts"
        )
    out = Path(config.output_dir)
    checkpoints, resume_from = open_checkpoints(config)
    backend = make_backend(config, plugins)
    rewards = RewardRouter.from_registry(plugins.rewards, config.rewards)
    samples, val = load_datasets(config, rewards, make_encoder(config, backend, plugins))
    data = [
        TrainData(samples, seed=config.seed, shuffle=config.data.shuffle, rank=r, world_size=workers)
        for r in range(workers)
    ]
    start = 0
    if resume_from is not None:
        ckpt = checkpoints.load(resume_from)
        for d, state in zip(data, ckpt.rank_data_states(workers, "ray.actor_workers={n}"), strict=True):
            d.load_state_dict(state)
        start = ckpt.step

    disabled = [name for name, info in plugins.infos.items() if info.status == "disabled"]
    started = start_ray(config.ray, address, cpus_needed(config))
    cluster = Cluster(config, disable=disabled)
    clean = False
    metrics_writer = progress = None
    try:
        cluster.start()
        atomic_write_text(out / WORKERS_FILE, wire.dumps(cluster.workers()).decode() + "\n")
        if resume_from is not None:
            cluster.call(
                f"resuming from step {start}", 0, [(a, "resume", (str(resume_from),)) for a in cluster.actors]
            )
        write_run_metadata(out, config, plugins)
        metrics_writer = MetricsWriter.for_run(out, config, plugins, start_step=start)
        if config.trainer.progress_bar:
            progress = ProgressBar(config.trainer.max_steps, start_step=start)
        controller = Controller(config, cluster, backend, data, val, rewards.canonical_type)
        last = controller.run(start, metrics_writer, progress, on_step)
        clean = True
        return last
    except WorkerFailure as exc:
        latest = checkpoints.latest()
        if latest is None:
            hint = "no checkpoint was written yet: start the run again" + (
                "" if exc.died else " once the cause is fixed"
            )
        elif exc.died:
            hint = f"the last complete checkpoint is {latest}: continue the run with --resume auto"
        else:
            hint = f"the last complete checkpoint is {latest}: once the cause is fixed, --resume auto continues from it"
        raise VideorlError(f"{exc}. {hint}") from None
    finally:
        if metrics_writer is not None:
            metrics_writer.close()
        if progress is not None:
            progress.close()
        cluster.shutdown(clean=clean)
        if started:
            ray.shutdown()
