"""A worker process of a Ray run, hosting the roles its controller gives it.

- ``actor``: one FSDP rank of the policy, its optimizer and (colocated) the reference copy; it runs
  :func:`videorl.actor.update.update` on its rank's trajectories and writes checkpoints with the other ranks;
- ``rollout``: a rollout engine; with ``actor`` in the same process (colocated placement) it is
  refreshed in place after each update, otherwise from the weights the actor ranks publish;
- ``reference``: the frozen reference model's log-probs of the responses (split placement, KL on);
- ``reward``: the reward router, scoring decoded responses;
- ``benchmark``: a rollout engine of its own for ``trainer.benchmarks`` passes beside training
  (``ray.benchmark_workers``), loaded with the weights of each pass's step.

Every worker reads the dataset files itself and encodes a prompt from the frame cache where its
frames are used, so its methods take and return :mod:`~videorl.cluster.wire` messages: sample ids,
token ids and numbers.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any

from videorl import algorithms
from videorl.cluster import episode_wire, wire
from videorl.cluster.benchmark_rows import WorkerBenchmarks
from videorl.cluster.runtime import load_worker_plugins
from videorl.data import load_samples
from videorl.episode import Episode
from videorl.generation import capabilities_of
from videorl.rollout import Completion
from videorl.rollout.vllm_common import weights_dtype
from videorl.runs.resume import resume, save_checkpoint
from videorl.runs.tensors import read_tensor_file, write_tensor_file
from videorl.timing import StageTimer

if TYPE_CHECKING:
    import torch

    from videorl.actor.policy import Actor
    from videorl.data import Sample
    from videorl.encoding import Prompt, PromptEncoder
    from videorl.parallel import Parallel
    from videorl.rollout import RolloutEngine
    from videorl.rollout.scoring import Scorer
    from videorl.runs.checkpoint import CheckpointManager

ROLES = ("actor", "rollout", "reference", "reward", "benchmark")


class Worker:
    """One process of a Ray run (a Ray actor). ``rank``/``world_size`` place an ``actor`` role among
    the FSDP ranks; :meth:`setup` builds the models once the controller knows the rendezvous."""

    def __init__(
        self, config: dict[str, Any], roles: list[str], rank: int, world_size: int, plugins: dict[str, Any]
    ) -> None:
        """``plugins``: what the controller loaded (:class:`~videorl.cluster.runtime.Cluster`)."""
        from videorl.config import DataConfig, TrainConfig, load_config
        from videorl.rollout.factory import make_workflow
        from videorl.train.compose import make_backend

        unknown = sorted(set(roles) - set(ROLES))
        if unknown:
            raise ValueError(f"unknown worker role(s) {unknown}; known: {', '.join(ROLES)}")
        self.config: TrainConfig = load_config(None, [], data=config)
        self.roles, self.rank, self.world_size = set(roles), rank, world_size
        self.plugins = load_worker_plugins(
            plugins["modules"], disable=plugins["disable"], strict=plugins["strict"]
        )
        self.backend = make_backend(self.config, self.plugins)
        # from this worker's plugins, run plugins included (the controller sends their modules)
        self.algorithm = algorithms.build(self.config.algorithm, self.plugins)
        # the run's workflow (single_turn or tool_agent: the launcher refuses others): a tool_agent
        # rollout worker runs it, every worker offers its tools in the prompts and rebuilds its replies
        self.workflow: Any = make_workflow(self.plugins, self.config.rollout.workflow, self.config)
        self.limits = episode_wire.Limits.of(self.config)
        d: DataConfig = self.config.data
        self.samples: dict[str, dict[str, Sample]] = {
            split: {s.id: s for f in files for s in load_samples(f, media_root=d.media_root)}
            for split, files in (("train", d.train_files), ("val", d.val_files))
        }
        self._prompt_cache: dict[tuple[str, str], Prompt] = {}
        self._cache_step = -1
        self.encoder: PromptEncoder | None = None  # built in setup
        self.actor: Actor | None = None
        self.engine: RolloutEngine | None = None
        self.engine_shares_actor = False
        self.weight_version = 0  # the policy version the engine holds (the step of its last update)
        self.reference: torch.nn.Module | None = None
        self.scorer: Scorer | None = None
        self.dist: Parallel | None = None
        self.benchmarks: WorkerBenchmarks | None = None  # built at the first benchmark pass

    # --- placement ---------------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """Where this worker runs: pid, node address, devices, and a free port for the rendezvous."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return {
            "pid": os.getpid(),
            "node": ray.util.get_node_ip_address(),
            "gpus": ray.get_gpu_ids(),
            "port": port,
        }

    def setup(self, master_addr: str, master_port: int) -> None:
        """Build this worker's roles; the ``actor`` ranks join one process group at ``master_addr``."""
        from videorl.actor.build import load_reference, make_actor
        from videorl.devices import local_device
        from videorl.parallel import Parallel, init_distributed
        from videorl.rewards.router import RewardRouter
        from videorl.rollout.factory import make_engine, make_rank_engine, max_model_len
        from videorl.train.compose import make_encoder, seed_everything

        config = self.config
        self.encoder = make_encoder(config, self.backend, self.plugins)
        self.encoder.prompt_tools = getattr(self.workflow, "prompt_tools", None)
        if "actor" in self.roles:
            os.environ.update(
                # Ray gives each worker one GPU as device 0: one training process per "node" of one GPU.
                RANK=str(self.rank),
                WORLD_SIZE=str(self.world_size),
                LOCAL_RANK="0",
                LOCAL_WORLD_SIZE="1",
                MASTER_ADDR=master_addr,
                MASTER_PORT=str(master_port),
            )
            self.dist = init_distributed(config.actor.sequence_parallel_size)
            seed_everything(config.seed + self.rank)  # as a torchrun rank does
            with_reference = config.algorithm.use_kl_loss and "reference" in self.roles
            self.actor, _ = make_actor(config, self.backend, self.dist, reference=with_reference)
            if "rollout" in self.roles:
                self.engine, self.engine_shares_actor = make_rank_engine(
                    config, self.plugins, self.backend, self.actor.model, self.dist
                )
        else:
            self.dist = Parallel()
            seed_everything(config.seed + self.rank)
            if "reference" in self.roles:
                self.reference = load_reference(config, self.backend)
            if self.roles & {"rollout", "benchmark"}:
                self.engine = make_engine(
                    self.plugins,
                    config.rollout.engine,
                    self.backend,
                    model_path=config.model.path,
                    dtype=config.model.dtype,
                    seed=config.seed + self.rank,
                    options=config.rollout.engine_options,
                    device=local_device(),
                    max_model_len=max_model_len(config),
                    weight_sync=config.rollout.weight_sync,
                    weight_bucket_mb=config.rollout.weight_bucket_mb,
                )
        if "reward" in self.roles:
            from videorl.rollout.scoring import local_scorer

            self.scorer = local_scorer(
                RewardRouter.from_registry(self.plugins.rewards, config.rewards), self.backend
            )

    def close(self) -> None:
        from videorl.parallel import close_distributed

        if self.engine is not None:
            self.engine.close()
        if self.encoder is not None:
            self.encoder.close()
        close_distributed()

    # --- prompts -----------------------------------------------------------------------------------

    def _sample(self, split: str, sample_id: str) -> Sample:
        try:
            return self.samples[split][sample_id]
        except KeyError:
            files = "data.train_files" if split == "train" else "data.val_files"
            raise KeyError(
                f"sample {sample_id!r} is not in this worker's copy of {files}: every node must see the same "
                "dataset files at the same paths"
            ) from None

    def _prompts(self, split: str, sample_ids: list[str], step: int) -> dict[str, Prompt]:
        """Each distinct sample encoded once per step in this process (frames from the cache, here):
        a colocated worker's update reuses what its rollout encoded."""
        if step != self._cache_step:
            self._prompt_cache, self._cache_step = {}, step
        out: dict[str, Prompt] = {}
        for sid in sample_ids:
            key = (split, sid)
            if key not in self._prompt_cache:
                assert self.encoder is not None, "prompts asked of a worker before its setup"
                self._prompt_cache[key] = self.encoder(self._sample(split, sid))
            out[sid] = self._prompt_cache[key]
        return out

    def _trajectories(self, items: list[list[Any]], prompts: Mapping[str, Prompt]) -> list[Episode]:
        """``[sample_id, group, completion, offline, advantage, ref_logprobs]`` rows as trajectories; a
        multi-turn episode comes as a :mod:`~videorl.cluster.episode_wire` message in the completion's
        place, its tool replies rebuilt from this worker's frame cache."""
        out = []
        for sid, group, c, offline, adv, ref in items:
            prompt = prompts[sid]
            if isinstance(c, dict):
                episode = episode_wire.episode_in(prompt, group, c, self.limits)
                rebuild = partial(self.workflow.rebuild_reply, self.config, self.backend, prompt)
                episode = episode_wire.attach_observations(episode, rebuild)
                episode.advantage, episode.ref_logprobs = adv, ref
            else:
                completion = wire.completion_in(c)
                episode = Episode(prompt, group, completion, offline=offline, advantage=adv, ref_logprobs=ref)
            out.append(episode)
        return out

    # --- roles -------------------------------------------------------------------------------------

    def generate(self, message: bytes) -> bytes:
        """``{split, step, ids, seed, greedy[, baseline, upcoming]}`` -> per sample its media metadata
        and completions (with ``baseline``, also one greedy response each), the weight ``version``
        that generated them, and the seconds spent encoding (``data``) and generating (``rollout``).
        The ``upcoming`` training samples are then prepared in the background (``data.prefetch``),
        for the next step's calls."""
        from videorl.rollout.single_turn import sampling_params, validation_params

        assert self.engine is not None, "generate() on a worker without the rollout role"
        request = wire.loads(message)
        start = time.perf_counter()
        prompts = self._prompts(request["split"], request["ids"], request["step"])
        encoded = time.perf_counter()
        params = (
            validation_params(self.config.rollout.max_response_length)
            if request["greedy"]
            else sampling_params(self.config, seed=request["seed"])
        )
        ordered = [prompts[sid] for sid in request["ids"]]
        encoded_prompts = [p.require_encoded() for p in ordered]
        outputs = self.engine.generate(encoded_prompts, params)
        baseline = None
        if request.get("baseline"):  # greedy, with the weights that sampled
            greedy = validation_params(self.config.rollout.max_response_length)
            baseline = [wire.completion_out(g[0]) for g in self.engine.generate(encoded_prompts, greedy)]
        if request.get("upcoming") and self.encoder is not None:
            # decoded and encoded in the encoder's thread while the step scores and updates
            self.encoder.prefetch([self._sample("train", sid) for sid in request["upcoming"]])
        return wire.dumps(
            {
                "media": [wire.media_out(p.media) for p in ordered],
                "completions": [[wire.completion_out(c) for c in group] for group in outputs],
                **({"baseline": baseline} if baseline is not None else {}),
                "version": self.weight_version,
                "seconds": {"data": encoded - start, "rollout": time.perf_counter() - encoded},
            }
        )

    def generate_episodes(self, message: bytes) -> bytes:
        """The tool_agent workflow's rollout here, where the frames are: ``{split, step, ids, seed,
        offline[, upcoming]}`` -> per sample its media metadata and group of episodes (unscored,
        :mod:`~videorl.cluster.episode_wire` messages), with ``offline``, the sample's offline
        trajectory replayed through the tools for each sample that has one (mix-policy picks among
        them once the controller has the rewards), the ``tool/*`` counters, the weight ``version``
        and the seconds spent encoding and generating."""
        assert self.engine is not None, "generate_episodes() on a worker without the rollout role"
        request = wire.loads(message)
        start = time.perf_counter()
        prompts = self._prompts(request["split"], request["ids"], request["step"])
        ordered = [prompts[sid] for sid in request["ids"]]
        encoded = time.perf_counter()
        config, backend, frames = self.config, self.backend, self.config.rollout.max_frames_per_call
        groups, metrics = self.workflow.generate(config, ordered, self.engine, backend, seed=request["seed"])
        offline = [
            episode_wire.episode_out(self.workflow.replay_offline(config, backend, p, 0), frames)
            if request["offline"] and p.sample.has_offline_trajectory
            else None
            for p in ordered
        ]
        if request.get("upcoming") and self.encoder is not None:
            self.encoder.prefetch([self._sample("train", sid) for sid in request["upcoming"]])
        return wire.dumps(
            {
                "media": [wire.media_out(p.media) for p in ordered],
                "groups": [[episode_wire.episode_out(e, frames) for e in group] for group in groups],
                "offline": offline,
                "metrics": metrics,
                "version": self.weight_version,
                "seconds": {"data": encoded - start, "rollout": time.perf_counter() - encoded},
            }
        )

    def generate_benchmark(self, message: bytes) -> bytes:
        """A benchmark pass's rows (:func:`videorl.train.benchmarks.rows_request`) -> each row's answer
        or the stage where it failed, encoded from the frame cache here."""

        assert self.engine is not None, "generate_benchmark() on a worker without an engine"
        if self.benchmarks is None:
            self.benchmarks = WorkerBenchmarks(self.config, self.plugins, self.backend)
        return wire.dumps(self.benchmarks.generate(self.engine, wire.loads(message)))

    def score(self, message: bytes) -> bytes:
        """``{split, items: [[sample_id, media, token_ids(, calls)]]}`` -> ``[[reward, parts]]`` in item
        order; ``calls``: a multi-turn episode's tool calls (:func:`~videorl.cluster.episode_wire.calls_out`),
        which the call cost, the invalid-call penalty and episode-reading rewards read."""
        from videorl.encoding import Prompt

        assert self.scorer is not None, "score() on a worker without the reward role"
        request = wire.loads(message)
        trajectories = []
        for sid, media, ids, *calls in request["items"]:
            prompt = Prompt(self._sample(request["split"], sid), None, wire.media_in(media))
            made = episode_wire.calls_in(calls[0], sid, self.limits) if calls else []
            trajectories.append(
                Episode(prompt, 0, Completion(ids, [0.0] * len(ids), "stop"), tool_calls=made)
            )
        self.scorer(trajectories)
        return wire.dumps([[t.reward, t.parts] for t in trajectories])

    def reference_logprobs(self, message: bytes) -> bytes:
        """``{step, items}`` (as :meth:`update`) -> the reference model's per-token log-probs of each
        response, and the seconds spent encoding (``data``) and in the forward (``reference``)."""
        from videorl.actor.update import reference_logprobs

        assert self.reference is not None, "reference_logprobs() on a worker without the reference role"
        request = wire.loads(message)
        start = time.perf_counter()
        prompts = self._prompts("train", [row[0] for row in request["items"]], request["step"])
        encoded = time.perf_counter()
        logprobs = reference_logprobs(
            self.reference, self.backend, self._trajectories(request["items"], prompts), self.config
        )
        seconds = {"data": encoded - start, "reference": time.perf_counter() - encoded}
        return wire.dumps({"logprobs": logprobs, "seconds": seconds})

    def update(self, message: bytes) -> bytes:
        """``{step, items, parity_check}`` -> this rank's actor metrics of the step (collective over the
        actor ranks). With ``parity_check`` (the run's first step) the engine's log-probs of the items
        are first compared with the actor's (:func:`videorl.actor.parity.first_step_check`).

        A colocated engine is refreshed in place afterwards (the full state dict is gathered on every
        rank, as under torchrun)."""
        from videorl.actor.step import train_step

        assert self.actor is not None and self.dist is not None, "update() on a worker without the actor role"
        request = wire.loads(message)
        timer = StageTimer()
        with timer("data"):
            prompts = self._prompts("train", [row[0] for row in request["items"]], request["step"])
            trajectories = self._trajectories(request["items"], prompts)
        engine = self.engine if not self.engine_shares_actor else None
        metrics = train_step(
            self.config, self.actor, self.algorithm, trajectories, self.dist, timer, step=request["step"],
            engine=engine, parity_check=bool(request.get("parity_check")),
        )  # fmt: skip
        self.weight_version = request["step"]  # a colocated engine (or the shared module) now holds it
        return wire.dumps({"metrics": metrics, "seconds": dict(timer.seconds)})

    def publish_weights(self) -> list[Any] | None:
        """Gather the full weights (collective over the actor ranks), in the rollout engines' dtype;
        rank 0 alone keeps them, puts them in Ray's object store bucket by bucket for the split
        rollout workers (:func:`~videorl.cluster.weights.publish_buckets`) and returns
        ``[handle, bytes]``; the other ranks drop each gathered tensor at once."""
        import ray

        from videorl.actor.policy import engine_weight_stream
        from videorl.cluster.weights import publish_buckets

        assert self.actor is not None, "publish_weights() on a worker without the actor role"
        c = self.config
        capabilities = capabilities_of(self.plugins.rollout_engines.get(c.rollout.engine))
        engine_dtype = weights_dtype(str(c.rollout.engine_options.get("dtype", c.model.dtype)))
        dtype = engine_dtype if capabilities.weights_in_engine_dtype else None
        stream = self.actor.weight_stream(dtype, on_device=True, keep=self.rank == 0)
        if self.rank != 0:
            for _ in stream:  # this rank's part of each gather
                pass
            return None
        named = engine_weight_stream(self.actor.backend, capabilities, stream)
        return publish_buckets(named, c.rollout.weight_bucket_mb << 20, ray.put)

    def load_weights(self, handle: list[Any], version: int) -> float:
        """Refresh the engine with weights of policy ``version`` published by :meth:`publish_weights`
        (read from the object store without a copy); the seconds it took."""
        assert self.engine is not None, "load_weights() on a worker without the rollout role"
        start = time.perf_counter()
        self._load_state(self.published_state(handle), version)
        return time.perf_counter() - start

    @staticmethod
    def published_state(handle: list[Any]) -> dict[str, torch.Tensor]:
        """The tensors of a :meth:`publish_weights` handle, as views of the object store's buffers."""
        import ray

        from videorl.cluster.weights import bucket_tensors

        return bucket_tensors(handle, ray.get)

    def _load_state(self, state: dict[str, torch.Tensor], version: int) -> None:
        assert self.engine is not None
        self.engine.update_weights(state)
        self.weight_version = version

    def keep_weights(self, handle: list[Any], path: str, plan: dict[str, Any]) -> None:
        """Write weights :meth:`publish_weights` published to ``path`` (safetensors, atomically) with
        ``plan`` (the policy ``version``, the ``benchmarks`` to score, the ``training`` record of those
        weights) in its metadata, so that a run resumed while benchmark passes scored them can finish
        them (:mod:`videorl.cluster.benchmark_group`)."""
        from videorl.cluster.benchmark_group import plan_metadata

        write_tensor_file(path, self.published_state(handle), plan_metadata(plan))  # tied weights stored once

    def load_weights_file(self, path: str, version: int) -> float:
        """Refresh the engine with weights :meth:`keep_weights` wrote for policy ``version``; the
        seconds it took. A file of another version is refused."""
        from videorl.cluster.benchmark_group import plan_of

        start = time.perf_counter()
        state, metadata = read_tensor_file(path)
        if plan_of(metadata).get("version") != version:
            raise ValueError(f"{path} does not hold the weights of policy version {version}")
        self._load_state(state, version)
        return time.perf_counter() - start

    # --- checkpoints -------------------------------------------------------------------------------

    @cached_property
    def checkpoints(self) -> CheckpointManager:
        """The run's checkpoints; one manager, which holds the write in flight between saves."""
        from videorl.train.compose import checkpoint_manager

        return checkpoint_manager(self.config)

    def save_checkpoint(self, step: int, data_state: dict[str, int]) -> None:
        """Every actor rank writes its shards of the model and optimizer states with its data position
        (held by the controller) and RNG state: the same checkpoint a torchrun run writes. The write
        ends in the background, except after the last step."""

        assert self.actor is not None and self.dist is not None
        state, last = self.actor.checkpoint_state(), self.config.trainer.max_steps
        save_checkpoint(step, state, self.checkpoints, self.dist, data_state=data_state, wait=step == last)

    def resume(self, path: str) -> int:
        """Load this rank's shards of the model and optimizer states and its RNG state from checkpoint
        ``path`` (the controller holds the data positions); a colocated engine gets the loaded weights."""
        from videorl.actor.policy import refresh_engine

        assert self.actor is not None and self.dist is not None
        step = resume(path, self.actor.checkpoint_state(), self.checkpoints, self.dist)
        if self.engine is not None and not self.engine_shares_actor:
            refresh_engine(self.actor, self.engine)
        self.weight_version = step
        return step
