"""The controller of a Ray run: the GRPO step of :mod:`videorl.train.local`, driving worker groups.

The actor workers are laid out as data × sequence groups (:mod:`videorl.cluster.groups`; without
``actor.sequence_parallel_size`` a group is one worker). The controller holds the data order of every
data group (as the ranks of each torchrun group would), the run's metrics and progress, and decides
everything between the workers' calls. One step:

1. rollout    each group's share of the prompts goes, as sample ids, to a rollout worker, which
              encodes the prompts from the frame cache and generates; reward workers score the
              responses; dynamic sampling and mix-policy decide as in one process
              (:func:`videorl.rollout.collect.collect_groups`). The groups' shares run at once, a thread each;
              an estimator that asks for a greedy baseline gets one per prompt from the same
              rollout worker, scored, and left out of the update as in one process;
2. advantage  by the run's estimator, here;
3. reference  split placement with the KL penalty: reference workers return per-token log-probs;
4. update     every actor worker runs :func:`videorl.actor.update.update` on its group's share (FSDP
              between them all; Ulysses within a group);
5. sync       colocated: each worker refreshes its own engine; split: actor rank 0 puts the weights in
              Ray's object store and every rollout worker loads them;
6. metrics    a group's episodes and rollout counters once, averaged over the groups; the actor
              workers' metrics averaged over the workers (as torchrun averages every rank's).

The controller is the Ray :class:`~videorl.train.loop.StepDriver`: :func:`videorl.train.loop.run` runs
it with validation, evaluations, logging and checkpoints (the same files a torchrun run writes) as in
one process. The first step's parity check (``rollout.parity_check``) runs on the actor workers, on
their shares, before the update.

Only sample ids, token ids and numbers cross between the controller and the workers
(:mod:`videorl.cluster.wire`); ``ray/*_bytes_per_sample`` metrics report how many.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import replace
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from videorl.cluster import episode_wire, wire
from videorl.cluster.groups import ActorGroups
from videorl.cluster.runtime import Cluster, WorkerHandle
from videorl.cluster.weights import ObjectStoreTransport, Published, WeightTransport
from videorl.parallel import mean_over_ranks
from videorl.timing import StageTimer

if TYPE_CHECKING:
    from videorl.algorithms import Algorithm
    from videorl.backend import ModelBackend
    from videorl.config import TrainConfig
    from videorl.data import Sample
    from videorl.encoding import Prompt
    from videorl.episode import Episode
    from videorl.rollout import Completion
    from videorl.rollout.scoring import Scorer
    from videorl.runs.checkpoint import Checkpoint
    from videorl.runs.records import CompletionLog
    from videorl.train.data import TrainData

WORKERS_FILE = "ray-workers.json"


class Generated(NamedTuple):
    """What a rollout worker generated for some samples (:meth:`Controller._generate`)."""

    prompts: list[Prompt]  # sample and media metadata (the worker holds the encoded prompt)
    completions: list[list[Completion]]  # per sample, its responses
    version: int  # the weight version that generated them
    baselines: list[Completion] | None = None  # per sample, a greedy response (asked for, same call)


class Controller:
    """The :class:`~videorl.train.loop.StepDriver` of a Ray run: each GRPO step over ``cluster``'s workers,
    every data group's share at once (a thread each)."""

    def __init__(
        self,
        config: TrainConfig,
        cluster: Cluster,
        backend: ModelBackend,
        data: list[TrainData],
        validation: list[Sample],
        canonical: Callable[[str], str] | None = None,
        completions: CompletionLog | None = None,
        *,
        algorithm: Algorithm,
        agent: bool = False,
    ) -> None:
        """``data``: each data group's data order (:class:`~videorl.cluster.groups.ActorGroups`);
        ``algorithm``: the run's estimator and loss (built by the composition root; the workers build
        theirs from the same config and plugins); ``agent``: the run's workflow is tool_agent, which
        the rollout workers run (:meth:`_episodes`);
        ``canonical``: the spelling of a problem type in metrics (the router's ``canonical_type``);
        ``completions``: where ``trainer.log_completions`` writes the step's responses."""
        self.config, self.cluster, self.backend, self.algorithm = config, cluster, backend, algorithm
        self.data, self.validation, self.agent = data, validation, agent
        self.canonical, self.completions = canonical, completions
        self.step = 0
        # bytes per step both ways: under the asynchronous driver the steps ahead are counted while
        # the current one updates, each under its own step
        self._bytes: defaultdict[int, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(data)), thread_name_prefix="videorl-rank")
        self._parity_due = config.rollout.parity_check != "off"  # on the first step after a (re)start
        self.transport: WeightTransport = ObjectStoreTransport(cluster)  # split placement's weight sync
        self.latest: Published | None = None  # the version published last, until the next step begins

    @cached_property
    def groups(self) -> ActorGroups:
        """The cluster's actor workers in data groups (train_on_ray checked that they form whole ones)."""
        return ActorGroups(len(self.cluster.actors), self.config.actor.sequence_parallel_size)

    def close(self) -> None:
        """Stop the rank threads (after a failure the workers are ended next)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- calls -------------------------------------------------------------------------------------

    def _call(
        self, stage: str, calls: Sequence[tuple[WorkerHandle, str, bytes]], step: int | None = None
    ) -> list[bytes]:
        """Send each worker its message (for ``step``, default the current one); count the bytes both ways."""
        step = self.step if step is None else step
        replies = self.cluster.call(stage, step, [(w, method, (message,)) for w, method, message in calls])
        with self._lock:
            counts = self._bytes[step]
            counts["sent"] += sum(len(m) for _, _, m in calls)
            counts["received"] += sum(len(r) for r in replies)
        return replies

    def scorer(self, split: str, step: int | None = None) -> Scorer:
        """A :data:`~videorl.rollout.scoring.Scorer` on the reward workers for samples of ``split`` (train
        or val) of ``step`` (default the current one): the responses are shared among the workers."""

        def score(trajectories: Sequence[Episode]) -> None:
            if not trajectories:
                return
            workers = self.cluster.rewards
            items = [
                [
                    t.prompt.sample.id,
                    wire.media_out(t.prompt.media),
                    t.completion.token_ids,
                    *([episode_wire.calls_out(t.tool_calls)] if t.segments else []),
                ]
                for t in trajectories
            ]
            size = -(-len(items) // len(workers))
            chunks = [items[i : i + size] for i in range(0, len(items), size)]
            calls = [(w, "score", wire.dumps({"split": split, "items": c})) for w, c in zip(workers, chunks)]
            scored = [row for reply in self._call("reward scoring", calls, step) for row in wire.loads(reply)]
            for t, (reward, parts) in zip(trajectories, scored, strict=True):
                t.reward, t.parts = float(reward), {k: float(v) for k, v in parts.items()}

        return score

    def _generate(
        self,
        group: int,
        split: str,
        samples: Sequence[Sample],
        seed: int | None,
        timer: StageTimer,
        step: int | None = None,
        upcoming: Sequence[Sample] = (),
        baseline: bool = False,
    ) -> Generated:
        """Data group ``group``'s rollout worker generates for ``samples`` of ``split`` (greedy without a
        ``seed``) for ``step`` (default the current one): their prompts (sample and media metadata;
        encoded on the worker), completions, and the weight version that generated them; with
        ``baseline``, in the same call, one greedy response per prompt too. The worker then prepares
        ``upcoming`` (training samples taken next, ``data.prefetch``) in the background."""
        from videorl.encoding import Prompt

        step = self.step if step is None else step
        worker = self._rollout_worker(group)
        request = {
            "split": split,
            "step": step,
            "ids": [s.id for s in samples],
            "seed": seed,
            "greedy": seed is None,
        }
        if upcoming:
            request["upcoming"] = [s.id for s in upcoming]
        if baseline:
            request["baseline"] = True
        message = wire.dumps(request)
        reply = wire.loads(self._call("rollout", [(worker, "generate", message)], step)[0])
        _add_seconds(timer, reply["seconds"])
        prompts = [Prompt(s, None, wire.media_in(m)) for s, m in zip(samples, reply["media"], strict=True)]
        completions = [[wire.completion_in(c) for c in group] for group in reply["completions"]]
        greedy = [wire.completion_in(c) for c in reply["baseline"]] if baseline else None
        return Generated(prompts, completions, int(reply["version"]), greedy)

    def _rollout_worker(self, group: int) -> WorkerHandle:
        """The worker that rolls out data group ``group``'s prompts (colocated: one of its actors)."""
        rollouts = self.cluster.rollouts
        return rollouts[self.groups.rollout_worker(group, len(rollouts), self.cluster.colocated)]

    def _episodes(
        self, group: int, samples: list[Sample], seed: int, first_group: int, timer: StageTimer, step: int
    ) -> tuple[list[list[Episode]], dict[str, float]]:
        """The tool_agent rollout of ``samples`` for data group ``group``: its rollout worker runs the
        workflow where the frames are and returns the episodes (segments, replies' requests, calls:
        :mod:`~videorl.cluster.episode_wire`), the reward workers score them with their calls, and
        mix-policy swaps in the offline trajectories the worker replayed, as one process does
        (:func:`~videorl.rollout.tool_agent.mix_offline`)."""
        from videorl.encoding import Prompt
        from videorl.rollout.tool_agent import mix_offline

        config, limits = self.config, episode_wire.Limits.of(self.config)
        mix = config.rollout.enable_mix_policy
        request: dict[str, Any] = {
            "split": "train", "step": step, "ids": [s.id for s in samples], "seed": seed, "offline": mix
        }  # fmt: skip
        if config.data.prefetch:  # the samples the group takes next: prepared while this step goes on
            request["upcoming"] = [s.id for s in self.data[group].upcoming(len(samples))]
        message = wire.dumps(request)
        reply = wire.loads(
            self._call("rollout", [(self._rollout_worker(group), "generate_episodes", message)], step)[0]
        )
        _add_seconds(timer, reply["seconds"])
        prompts = [Prompt(s, None, wire.media_in(m)) for s, m in zip(samples, reply["media"], strict=True)]
        groups = []
        for g, (prompt, episodes) in enumerate(zip(prompts, reply["groups"], strict=True)):
            if len(episodes) != config.rollout.n:
                raise episode_wire.EpisodeMessageError(
                    f"sample {prompt.sample.id!r}: {len(episodes)} episodes, rollout.n is {config.rollout.n}"
                )
            groups.append([episode_wire.episode_in(prompt, first_group + g, e, limits) for e in episodes])
        scorer = self.scorer("train", step)
        with timer("reward"):
            scorer([e for group in groups for e in group])
        metrics = {str(k): float(v) for k, v in reply["metrics"].items()}
        if mix:
            offline = reply["offline"]
            replay = lambda p, g: episode_wire.episode_in(p, g, offline[g - first_group], limits)  # noqa: E731
            with timer("reward"):
                metrics.update(mix_offline(config, groups, scorer, replay))
        for t in (t for group in groups for t in group):
            t.version = int(reply["version"])
        return groups, metrics

    def _rollout(self, group: int, timer: StageTimer, step: int) -> Callable[[list[Sample], int, int], Any]:
        """A :data:`~videorl.rollout.collect.Rollout` for data group ``group`` on the workers, for
        ``step``: each trajectory carries the weight version that generated it. When the estimator asks
        for a greedy baseline (:attr:`~videorl.algorithms.Algorithm.greedy_baseline`), the same call to
        the rollout worker also generates one greedy response per prompt (so with the same weights),
        scored on the reward workers and appended to its group as in one process
        (:func:`~videorl.rollout.single_turn.add_baselines`)."""
        from videorl.rollout.single_turn import add_baselines, finish_groups

        baselines = self.algorithm.greedy_baseline
        data = self.data[group]

        def rollout(samples: list[Sample], seed: int, first_group: int) -> Any:
            if self.agent:
                return self._episodes(group, samples, seed, first_group, timer, step)
            # the samples the group takes next: the worker prepares them while this step goes on
            upcoming = data.upcoming(len(samples)) if self.config.data.prefetch else []
            got = self._generate(
                group, "train", samples, seed, timer, step, upcoming=upcoming, baseline=baselines
            )
            scorer = self.scorer("train", step)
            groups, metrics = finish_groups(
                self.config, got.prompts, got.completions, scorer, self.backend, first_group=first_group,
                timer=timer,
            )  # fmt: skip
            if got.baselines is not None:
                add_baselines(self.config, groups, got.baselines, scorer, self.backend, timer)
            for t in (t for group in groups for t in group):
                t.version = got.version
            return groups, metrics

        return rollout

    # --- the step ----------------------------------------------------------------------------------

    def _collect(self, group: int, step: int, timer: StageTimer) -> tuple[list[Episode], dict[str, float]]:
        from videorl.rollout.collect import collect_groups
        from videorl.train.step import assign_advantages

        per_group = max(1, self.config.data.rollout_batch_size // self.groups.count)
        groups, extra = collect_groups(
            self.config, step, per_group, self.data[group], self._rollout(group, timer, step), group
        )
        return assign_advantages(self.config, self.algorithm, groups), extra

    def _collected(self, step: int) -> tuple[list[StageTimer], list[tuple[list[Episode], dict[str, float]]]]:
        """Every data group's trajectories of ``step`` and rollout counters, with the stage times per
        group (here: generated now; :class:`~videorl.cluster.async_driver.AsyncController`: ahead)."""

        groups = range(self.groups.count)
        timers = [StageTimer() for _ in groups]
        return timers, run_all(self._pool, [partial(self._collect, g, step, timers[g]) for g in groups])

    def _reference(self, shares: list[list[Episode]], timers: list[StageTimer]) -> None:
        """Split placement, KL on: each share's reference log-probs from a reference worker."""
        workers = self.cluster.references
        calls = [
            (
                workers[r % len(workers)],
                "reference_logprobs",
                wire.dumps(
                    {"step": self.step, "items": _items(share, self.config.rollout.max_frames_per_call)}
                ),
            )
            for r, share in enumerate(shares)
        ]
        for share, timer, reply in zip(shares, timers, self._call("reference forward", calls)):
            out = wire.loads(reply)
            _add_seconds(timer, out["seconds"])
            for t, logprobs in zip(share, out["logprobs"], strict=True):
                t.ref_logprobs = logprobs

    def _update(
        self, step: int, shares: list[list[Episode]], timers: list[StageTimer], parity_check: bool
    ) -> list[dict[str, float]]:
        """Every actor worker's update on its data group's share (first ``parity_check``: engine vs actor
        log-probs); each worker's metrics. A group's stage times are its workers' mean."""
        messages = [
            wire.dumps(
                {
                    "step": step,
                    "items": _items(share, self.config.rollout.max_frames_per_call),
                    "parity_check": parity_check,
                }
            )
            for share in shares
        ]
        per_worker = zip(self.cluster.actors, self.groups.to_workers(messages), strict=True)
        calls = [(actor, "update", message) for actor, message in per_worker]
        replies = [wire.loads(reply) for reply in self._call("actor update", calls)]
        for timer, group in zip(timers, self.groups.by_group(replies), strict=True):
            _add_seconds(timer, mean_over_ranks([out["seconds"] for out in group]))
        return [out["metrics"] for out in replies]

    def _sync_weights(self) -> float:
        """Split placement: publish the actor's weights (version: the current step), load them into
        every rollout engine; their bytes."""
        published = self.latest = self.transport.publish(self.step)
        self.transport.deliver(published)
        return published.size

    def current_weights(self) -> Published:
        """The weights of the step just trained as a published version, for workers beside the
        rollout ones (the benchmark workers): with split placement the version the step's weight sync
        published, otherwise gathered now (a collective over the actor ranks)."""
        if self.latest is None or self.latest.version != self.step:
            self.latest = self.transport.publish(self.step)
        return self.latest

    def _validate(self, group: int) -> dict[str, float]:
        from videorl.train.step import validation_metrics

        shard = self.validation[group :: self.groups.count]
        if not shard:
            return {}
        got = self._generate(group, "val", shard, None, StageTimer())
        return validation_metrics(got.prompts, got.completions, self.scorer("val"), self.canonical)

    # --- the driver --------------------------------------------------------------------------------

    @property
    def has_validation(self) -> bool:
        return bool(self.validation)

    @property
    def rollout_worker_count(self) -> int:
        """How many rollout workers :meth:`call_rollouts` addresses."""
        return len(self.cluster.rollouts)

    def resume(self, checkpoint: Checkpoint) -> None:
        """The actor workers load model, optimizer and RNG state of ``checkpoint`` (the groups' data
        positions are already in ``data``); split rollout engines, which hold the base model, get the
        loaded weights."""
        self.cluster.call(
            f"resuming from step {checkpoint.step}",
            0,
            [(a, "resume", (str(checkpoint.path),)) for a in self.cluster.actors],
        )
        if not self.cluster.colocated:
            self.step = checkpoint.step
            self._sync_weights()

    def step_once(self, step: int, timer: StageTimer) -> dict[str, float]:
        """One GRPO step over the workers; its metrics averaged as torchrun does (a data group's episodes
        and counters once per group, the actor metrics over the workers), each stage's time (measured
        per group) averaged into ``timer``."""
        from videorl.train.step import step_metrics

        config = self.config
        split = not self.cluster.colocated
        self.step, self.latest = step, None  # a version held for a pass is held by the pass alone now
        timers, collected = self._collected(step)
        shares = [share for share, _ in collected]
        if self.cluster.references:  # split placement with the KL penalty and no LoRA
            self._reference(shares, timers)
        parity_check, self._parity_due = self._parity_due, False
        actor_metrics = self._update(step, shares, timers, parity_check)
        weight_bytes = 0.0
        if split:
            with timers[0]("weight_sync"):
                weight_bytes = self._sync_weights()
        if self.completions is not None:
            decode = partial(self.backend.processor.tokenizer.decode, skip_special_tokens=True)
            self.completions.log(step, [t for share in shares for t in share], decode)
        for stage, seconds in mean_over_ranks([t.seconds for t in timers]).items():
            timer.seconds[stage] += seconds
        metrics = {
            **mean_over_ranks([step_metrics(share, canonical=self.canonical) for share in shares]),
            **mean_over_ranks(actor_metrics),
            **mean_over_ranks([extra for _, extra in collected]),
        }
        samples = max(1, config.data.rollout_batch_size)
        with self._lock:  # this step's messages; what validation sent after the previous step is dropped
            counts = self._bytes.pop(step, defaultdict(int))
            for done in [s for s in self._bytes if s < step]:
                del self._bytes[done]
        metrics["ray/sent_bytes_per_sample"] = counts["sent"] / samples
        metrics["ray/received_bytes_per_sample"] = counts["received"] / samples
        if split:
            metrics["ray/weight_sync_bytes"] = weight_bytes
        return metrics

    def validate(self, step: int) -> dict[str, float]:
        """Every data group's share of the validation samples, greedily, at once; the ``val/*`` metrics
        averaged over the groups."""
        groups = range(self.groups.count)
        return mean_over_ranks(run_all(self._pool, [partial(self._validate, g) for g in groups]))

    def save(self, step: int) -> None:
        """Every actor worker gathers; actor-0 writes, with each worker's data position (its group's,
        held here)."""
        self.save_positions(step, [d.state_dict() for d in self.data])

    def save_positions(self, step: int, positions: Sequence[dict[str, int]]) -> None:
        """The checkpoint of ``step`` with each data group's data position ``positions`` (recorded for
        each of the group's workers, as each torchrun rank records its own)."""
        states = self.groups.to_workers(positions)
        calls = [(a, "save_checkpoint", (step, s)) for a, s in zip(self.cluster.actors, states, strict=True)]
        self.cluster.call("checkpoint", step, calls)

    def call_rollouts(self, stage: str, method: str, requests: Sequence[Any]) -> list[Any]:
        """Call ``Worker.<method>(message) -> reply`` on every rollout worker at once, worker ``i`` with
        ``requests[i]`` (plain values, :mod:`~videorl.cluster.wire`); the decoded replies in order.

        For work beside the step that needs the engines' current weights (an evaluation's generation);
        a failure is a :class:`~videorl.cluster.runtime.WorkerFailure` naming the worker and ``stage``."""
        workers = self.cluster.rollouts
        if len(requests) != len(workers):
            raise ValueError(f"{stage}: {len(requests)} request(s) for {len(workers)} rollout worker(s)")
        replies = self._call(stage, [(w, method, wire.dumps(r)) for w, r in zip(workers, requests)])
        return [wire.loads(reply) for reply in replies]


def _add_seconds(timer: StageTimer, seconds: dict[str, float]) -> None:
    """Add the stage times a worker measured to its data group's ``timer``."""
    for stage, value in seconds.items():
        timer.seconds[stage] += value


def run_all(pool: ThreadPoolExecutor, tasks: Sequence[Callable[[], Any]]) -> list[Any]:
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


def _items(share: Sequence[Episode], frames: int) -> list[list[Any]]:
    """A rank's trajectories for the actor and reference workers (they encode the prompts themselves;
    a multi-turn episode as its :mod:`~videorl.cluster.episode_wire` message, ``frames``: the per-call
    frame budget)."""
    return [
        [
            t.prompt.sample.id,
            t.group,
            episode_wire.episode_out(t, frames) if t.segments else wire.completion_out(t.completion),
            t.offline,
            t.advantage,
            t.ref_logprobs,
        ]
        for t in share
    ]
