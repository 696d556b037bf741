"""The Ray path's pieces that need no Ray runtime: the wire format, the worker groups a config asks
for, the controller's byte counting and failure messages (the runs themselves: tests/test_train_ray.py)."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

from videorl.cluster import wire
from videorl.cluster.controller import Controller
from videorl.cluster.runtime import WorkerFailure, WorkerHandle, _groups, cpus_needed
from videorl.config import load_config
from videorl.data import Sample
from videorl.encoding import Prompt
from videorl.episode import Episode
from videorl.errors import ConfigError
from videorl.media.info import MediaInfo
from videorl.rollout import Completion
from videorl.timing import StageTimer

BASE = ["model.path=/m", "data.train_files=[/d.jsonl]"]


@pytest.mark.parametrize("value", [torch.zeros(2, dtype=torch.uint8), np.zeros(3), b"\x00\x01", {1, 2}])
def test_wire_refuses_anything_but_plain_values(value: Any) -> None:
    with pytest.raises(wire.WireError, match=f"a .*{type(value).__name__} cannot cross a process boundary"):
        wire.dumps({"ids": ["a"], "frames": [value]})


def test_wire_round_trips_completions_and_media() -> None:
    c = Completion([5, 6, 151645], [-0.5, -1.25, math.nan], "stop")
    back = wire.completion_in(wire.loads(wire.dumps(wire.completion_out(c))))
    assert back.token_ids == c.token_ids and back.finish_reason == "stop"
    assert back.logprobs[:2] == [-0.5, -1.25] and math.isnan(back.logprobs[2])  # offline responses: NaN
    media = MediaInfo(
        duration=4.0, fps=30.0, num_frames=8, width=640, height=360, resized_width=56, resized_height=56
    )
    assert wire.media_in(wire.loads(wire.dumps(wire.media_out(media)))) == media
    assert wire.media_in(wire.loads(wire.dumps(wire.media_out(None)))) is None
    assert wire.dumps({"ids": ["a", "b"], "seed": 7}) == b'{"ids":["a","b"],"seed":7}'


def test_worker_groups_per_placement() -> None:
    colocated = load_config(None, [*BASE, "ray.actor_workers=4", "algorithm.use_kl_loss=true"])
    assert _groups(colocated) == [
        ("actor", ["actor", "rollout", "reference"], 4, "gpus"),
        ("reward", ["reward"], 1, "none"),
    ]
    assert cpus_needed(colocated) == 5.0
    split = load_config(
        None,
        [
            *BASE,
            "ray.placement=split",
            "ray.actor_workers=4",
            "ray.rollout_workers=2",
            "ray.reward_workers=2",
            "ray.cpus_per_worker=2",
        ],
    )
    assert _groups(split) == [
        ("actor", ["actor"], 4, "gpus"),
        ("rollout", ["rollout"], 2, "rollout_gpus"),
        ("reward", ["reward"], 2, "none"),
    ]
    assert cpus_needed(split) == 16.0  # (4 + 2 + 2) workers x 2 CPUs
    with_kl = load_config(
        None, [*BASE, "ray.placement=split", "ray.actor_workers=2", "algorithm.use_kl_loss=true"]
    )
    assert [g[:3] for g in _groups(with_kl)] == [
        ("actor", ["actor"], 2),
        ("rollout", ["rollout"], 2),
        ("reference", ["reference"], 2),
        ("reward", ["reward"], 1),
    ]
    # LoRA: the actor's module with its adapters off is the reference, in either placement
    for placement in ("split", "colocated"):
        lora = load_config(
            None,
            [*BASE, f"ray.placement={placement}", "algorithm.use_kl_loss=true", "actor.lora.enabled=true"],
        )
        assert all("reference" not in roles for _, roles, _, _ in _groups(lora))


def test_ray_section_is_validated() -> None:
    with pytest.raises(ConfigError, match="ray.placement"):
        load_config(None, [*BASE, "ray.placement=spread"])  # neither colocated nor split
    with pytest.raises(ConfigError) as err:
        load_config(None, [*BASE, "ray.actor_workers=0", "ray.rollout_workers=0", "ray.cpus_per_worker=0"])
    text = str(err.value)
    assert "ray.actor_workers must be >= 1" in text and "ray.rollout_workers must be >= 1 (or null)" in text
    assert "ray.cpus_per_worker must be > 0" in text


# --- the controller's calls, against a recording stand-in for the cluster ---------------------------


@dataclass
class FakeCluster:
    """Answers ``generate`` and ``score`` as workers would, recording every message."""

    replies: dict[str, Any]
    sent: list[tuple[str, str, bytes]] = field(default_factory=list)
    rollouts: list[WorkerHandle] = field(
        default_factory=lambda: [WorkerHandle("rollout-0", ["rollout"], None)]
    )
    actors: list[WorkerHandle] = field(default_factory=lambda: [WorkerHandle("actor-0", ["actor"], None)])
    rewards: list[WorkerHandle] = field(
        default_factory=lambda: [WorkerHandle(f"reward-{i}", ["reward"], None) for i in range(2)]
    )
    colocated: bool = False

    def call(
        self, stage: str, step: int, calls: list[tuple[WorkerHandle, str, tuple[Any, ...]]]
    ) -> list[bytes]:
        out = []
        for worker, method, (message,) in calls:
            self.sent.append((worker.name, method, message))
            request = wire.loads(message)
            reply = self.replies[method](request)
            out.append(wire.dumps(reply))
        return out


def _sample(i: int) -> Sample:
    return Sample(
        id=f"s{i}",
        data_type="video",
        problem="Colour?",
        problem_type="multiple choice",
        ground_truth="A",
        videos=[f"/clips/{i}.mp4"],
    )


def test_controller_sends_ids_and_counts_every_byte() -> None:
    media = {
        "duration": 2.0,
        "fps": 8.0,
        "num_frames": 4,
        "width": 64,
        "height": 64,
        "resized_width": 56,
        "resized_height": 56,
    }
    replies = {
        "generate": lambda r: {
            "media": [media] * len(r["ids"]),
            "completions": [[[[7, 8], [-0.5, -0.25], "stop"]]] * len(r["ids"]),
            "version": 2,
            "seconds": {"data": 0.5, "rollout": 1.5},
        },
        "score": lambda r: [[1.0, {"accuracy": 1.0}] for _ in r["items"]],
    }
    cluster = FakeCluster(replies)
    config = load_config(None, BASE)
    controller = Controller(config, cluster, None, [], [], algorithm=built(config))  # type: ignore[arg-type]
    controller.step = 3
    timer = StageTimer()
    prompts, outputs, version, baselines = controller._generate(
        0, "train", [_sample(0), _sample(1)], 11, timer
    )
    assert baselines is None  # none asked for
    request = b'{"split":"train","step":3,"ids":["s0","s1"],"seed":11,"greedy":false}'
    assert cluster.sent == [("rollout-0", "generate", request)]
    assert [p.sample.id for p in prompts] == ["s0", "s1"] and all(p.encoded is None for p in prompts)
    assert prompts[0].media == MediaInfo(**media)
    assert outputs[1][0].token_ids == [7, 8] and timer.seconds == {"data": 0.5, "rollout": 1.5}
    assert version == 2  # the weight version the rollout worker generated with

    trajectories = [Episode(p, g, outputs[g][0]) for g, p in enumerate(prompts)] * 2
    controller.scorer("val")(trajectories)
    assert [t.reward for t in trajectories] == [1.0] * 4 and trajectories[0].parts == {"accuracy": 1.0}
    scored = [m for m in cluster.sent if m[1] == "score"]
    assert [name for name, _, _ in scored] == ["reward-0", "reward-1"]  # the four responses shared among two
    item = '["s0",' + wire.dumps(media).decode() + ",[7,8]]"
    assert scored[0][2] == f'{{"split":"val","items":[{item},{item.replace("s0", "s1")}]}}'.encode()
    reply_bytes = len(wire.dumps(replies["generate"]({"ids": ["s0", "s1"]}))) + 2 * len(
        b'[[1.0,{"accuracy":1.0}],[1.0,{"accuracy":1.0}]]'
    )
    assert controller._bytes[3] == {  # counted under the step the messages were for
        "sent": len(request) + len(scored[0][2]) + len(scored[1][2]),
        "received": reply_bytes,
    }


@dataclass
class ColocatedCluster:
    """Two actor workers (each also a rollout worker) and a reward worker answering as workers would;
    every call recorded as ``(worker, method, request)``."""

    replies: dict[str, Any]
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    actors: list[WorkerHandle] = field(
        default_factory=lambda: [WorkerHandle(f"actor-{i}", ["actor", "rollout"], None) for i in range(2)]
    )
    rewards: list[WorkerHandle] = field(default_factory=lambda: [WorkerHandle("reward-0", ["reward"], None)])
    references: list[WorkerHandle] = field(default_factory=list)
    colocated: bool = True

    @property
    def rollouts(self) -> list[WorkerHandle]:
        return self.actors

    def call(
        self, stage: str, step: int, calls: list[tuple[WorkerHandle, str, tuple[Any, ...]]]
    ) -> list[Any]:
        out = []
        for worker, method, args in calls:
            if isinstance(args[0], bytes):  # a wire message
                request = wire.loads(args[0])
                self.calls.append((worker.name, method, request))
                out.append(wire.dumps(self.replies[method](worker.name, request)))
            else:
                self.calls.append((worker.name, method, args))
                out.append(None)
        return out


@pytest.mark.parametrize("parity_check", ["first_step", "off"])
def test_ray_driver_runs_the_parity_check_on_the_first_step_only(tmp_path: Any, parity_check: str) -> None:
    """The controller in the one loop: the actor workers are asked for the first-step parity check on
    the first step of the run (``rollout.parity_check``) and report it; each step's metrics are the
    ranks' means; the last step is checkpointed with each rank's data position."""
    from videorl.runs.checkpoint import CheckpointManager
    from videorl.train.data import TrainData
    from videorl.train.loop import RunIO, run

    def update(worker: str, r: dict[str, Any]) -> dict[str, Any]:
        rank = int(worker[-1])
        parity = {"parity/logprob_diff/video": 1e-6 * (rank + 1)} if r["parity_check"] else {}
        return {"metrics": {"actor/loss": 0.5 + rank, **parity}, "seconds": {"actor": 1.0 + rank}}

    replies = {
        "generate": lambda w, r: {
            "media": [None] * len(r["ids"]),
            "completions": [[[[7], [-0.5], "stop"], [[8], [-0.5], "stop"]]] * len(r["ids"]),
            "version": 0,
            "seconds": {"data": 0.5, "rollout": 1.5},
        },
        "score": lambda w, r: [[float(i % 2), {}] for i, _ in enumerate(r["items"])],
        "update": update,
    }
    cluster = ColocatedCluster(replies)
    config = load_config(
        None,
        [*BASE, "rollout.n=2", "data.rollout_batch_size=2", "actor.global_batch_size=2",
         "trainer.max_steps=2", "trainer.save_every=0", f"rollout.parity_check='{parity_check}'"],
    )  # fmt: skip
    samples = [_sample(i) for i in range(4)]
    data = [TrainData(samples, seed=0, shuffle=False, rank=r, world_size=2) for r in range(2)]
    backend = type("Backend", (), {"forbidden_token_ids": lambda self: set()})()
    controller = Controller(config, cluster, backend, data, [], algorithm=built(config))  # type: ignore[arg-type]
    rows: list[dict[str, float]] = []
    try:
        run(config, controller, RunIO(CheckpointManager(tmp_path)), 0, on_step=lambda s, m: rows.append(m))
    finally:
        controller.close()

    updates = [
        (name, r["step"], r["parity_check"]) for name, method, r in cluster.calls if method == "update"
    ]
    first = parity_check == "first_step"
    assert updates == [
        ("actor-0", 1, first),
        ("actor-1", 1, first),
        ("actor-0", 2, False),
        ("actor-1", 2, False),
    ]
    assert [("parity/logprob_diff/video" in row) for row in rows] == [first, False]
    if first:
        assert rows[0]["parity/logprob_diff/video"] == pytest.approx(1.5e-6)  # the ranks' mean
    assert [row["actor/loss"] for row in rows] == [1.0, 1.0] and rows[0]["time/actor"] == 1.5
    assert rows[0]["reward/overall"] == 0.5 and rows[0]["time/rollout"] == 1.5
    saves = [(name, args) for name, method, args in cluster.calls if method == "save_checkpoint"]
    assert saves == [("actor-0", (2, data[0].state_dict())), ("actor-1", (2, data[1].state_dict()))]


def test_prompt_without_tokens_says_where_it_was_encoded() -> None:
    with pytest.raises(RuntimeError, match="sample 's0': its prompt was encoded in another process"):
        Prompt(_sample(0), None, None).require_encoded()


def test_worker_failure_names_worker_process_stage_and_step() -> None:
    worker = WorkerHandle("actor-1", ["actor", "rollout"], None, pid=4321, node="10.0.0.2")

    class Wrapped(Exception):
        cause = ValueError("sample 'x' has 9000 prompt tokens")

    failed = WorkerFailure(worker, "actor update", 7, Wrapped("traceback ..."), died=False)
    assert str(failed) == (
        "worker actor-1 (actor+rollout; pid 4321 on 10.0.0.2) failed during actor update of step 7: "
        "ValueError: sample 'x' has 9000 prompt tokens"
    )
    from ray.exceptions import RayActorError

    lost = RayActorError(
        None,
        "The actor died unexpectedly before finishing this task.\n\tclass_name: Worker\n"
        "\tpid: 4321\nThe actor is dead because its worker process has died.",
        False,
        False,
    )
    assert str(WorkerFailure(worker, "rollout", 3, lost, died=True)) == (
        "worker actor-1 (actor+rollout; pid 4321 on 10.0.0.2) died during rollout of step 3: The actor died "
        "unexpectedly before finishing this task. The actor is dead because its worker process has died."
    )
    # A worker whose __init__ raised: Ray calls it dead; the report gives the worker's own exception.
    init = RayActorError(
        None,
        "The actor died because of an error raised in its creation task, ray::Worker.__init__()"
        "\nTraceback (most recent call last):\n  File x\nKeyError: 'sample s3'",
        True,
        False,
    )
    assert str(WorkerFailure(worker, "worker start-up", 0, init, died=False)).endswith(
        "failed during worker start-up: KeyError: 'sample s3'"
    )


def test_paths_are_made_absolute_for_workers_that_start_elsewhere(tmp_path: Any, monkeypatch: Any) -> None:
    from videorl.cluster.controller import absolute_paths

    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    config = load_config(
        None,
        [
            "model.path=model",
            "data.train_files=[d/train.jsonl]",
            "data.val_files=[v.jsonl]",
            "data.cache_dir=cache",
            "data.prompt_template=video_qa",
            "output_dir=runs/x",
        ],
    )
    out = absolute_paths(config)
    assert out.model.path == str(tmp_path / "model")
    assert out.data.train_files == [str(tmp_path / "d" / "train.jsonl")] and out.data.val_files == [
        str(tmp_path / "v.jsonl")
    ]
    assert out.data.cache_dir == str(tmp_path / "cache") and out.output_dir == str(tmp_path / "runs" / "x")
    assert (
        out.data.prompt_template == "video_qa" and out.data.media_root is None
    )  # a template name stays a name
    hub = absolute_paths(load_config(None, ["model.path=Qwen/Qwen3-VL-8B", "data.train_files=[/d.jsonl]"]))
    assert hub.model.path == "Qwen/Qwen3-VL-8B"  # not a local directory: left as given


def test_workers_load_the_controllers_plugin_modules_from_anywhere(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``plugins:`` file and a ``--plugin`` import path the controller loaded reach a worker started
    elsewhere (another directory, without the controller's ``sys.path``), which registers the same."""
    import json
    import subprocess
    import sys

    from videorl.cluster.runtime import load_worker_plugins, plugin_modules
    from videorl.runs.plugins import load_run_plugins

    hook = (
        "from videorl.api import hookimpl\n\n@hookimpl\n"
        "def register_rewards(register):\n    register({!r}, lambda inp: 1.0)\n"
    )
    (tmp_path / "quick_worker_reward.py").write_text(hook.format("from_file"))
    package = tmp_path / "src" / "quick_worker_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "rewards.py").write_text(hook.format("from_package"))
    monkeypatch.syspath_prepend(str(tmp_path / "src"))  # as the controller's working directory would be
    plugins = load_run_plugins(["quick_worker_reward.py"], base=tmp_path, extra=["quick_worker_pkg.rewards"])
    modules = plugin_modules(plugins)
    assert modules == [
        ["quick_worker_pkg.rewards", str(package / "rewards.py")],
        ["quick_worker_reward", str(tmp_path / "quick_worker_reward.py")],
    ]
    worker = (
        "import json, sys\nfrom videorl.cluster.runtime import load_worker_plugins\n"
        "p = load_worker_plugins(json.loads(sys.argv[1]), disable=[], strict=True)\n"
        "print(json.dumps(sorted(n for n in p.rewards.names() if n.startswith('from_'))))\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", worker, json.dumps(modules)], cwd=elsewhere, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == ["from_file", "from_package"]
    with pytest.raises(ConfigError, match=r"plugin module 'gone\.rewards': /nowhere/gone/rewards\.py, where"):
        load_worker_plugins([["gone.rewards", "/nowhere/gone/rewards.py"]], disable=[], strict=True)


@pytest.mark.parametrize("prefetch", [True, False])
def test_rollout_workers_are_told_the_samples_their_rank_takes_next(prefetch: bool) -> None:
    """With ``data.prefetch`` each generate request names the samples the rank's next take returns, so
    the worker decodes and encodes them in the background; without, it names none."""
    from types import SimpleNamespace

    from videorl.train.data import TrainData

    media = {"duration": 2.0, "fps": 8.0, "num_frames": 4, "width": 64, "height": 64,
             "resized_width": 56, "resized_height": 56}  # fmt: skip
    replies = {
        "generate": lambda r: {
            "media": [media] * len(r["ids"]),
            "completions": [[[[7, 8], [-0.5, -0.25], "stop"]] * 2] * len(r["ids"]),
            "version": 0,
            "seconds": {},
        },
        "score": lambda r: [[float(i % 2), {}] for i, _ in enumerate(r["items"])],
    }
    cluster = FakeCluster(replies)
    config = load_config(None, [*BASE, "rollout.n=2", f"data.prefetch={str(prefetch).lower()}"])
    data = TrainData([_sample(i) for i in range(6)], seed=0, shuffle=False)
    backend = SimpleNamespace(forbidden_token_ids=set, processor=None)
    controller = Controller(config, cluster, backend, [data], [], algorithm=built(config))  # type: ignore[arg-type]
    rollout = controller._rollout(0, StageTimer(), 1)
    rollout(data.take(2), 11, 0)
    (request,) = [wire.loads(m) for _, method, m in cluster.sent if method == "generate"]
    assert request["ids"] == ["s0", "s1"]
    assert request.get("upcoming") == (["s2", "s3"] if prefetch else None)
    controller.close()


def test_a_rollout_worker_prepares_the_upcoming_samples_in_the_background() -> None:
    """``Worker.generate`` answers its samples, then queues the upcoming ones on its encoder."""
    from types import SimpleNamespace

    from videorl.cluster.worker import Worker

    queued: list[list[str]] = []
    prompt = SimpleNamespace(require_encoded=lambda: "encoded", media=None)
    worker = Worker.__new__(Worker)  # its state as setup leaves it, without a model
    worker.config = load_config(None, BASE)
    worker.samples = {"train": {s.id: s for s in (_sample(i) for i in range(4))}}
    worker._prompt_cache, worker._cache_step = {}, -1
    worker.encoder = SimpleNamespace(  # type: ignore[assignment]
        prefetch=lambda samples: queued.append([s.id for s in samples])
    )
    worker._prompts = lambda split, ids, step: {sid: prompt for sid in ids}  # type: ignore[method-assign]
    worker.engine = SimpleNamespace(  # type: ignore[assignment]
        generate=lambda prompts, params: [[Completion([5], [-0.1], "stop")] for _ in prompts]
    )
    worker.weight_version = 3
    message = {"split": "train", "step": 1, "ids": ["s0", "s1"], "seed": 1, "greedy": False,
               "upcoming": ["s2", "s3"]}  # fmt: skip
    reply = wire.loads(worker.generate(wire.dumps(message)))
    assert len(reply["completions"]) == 2 and reply["version"] == 3
    assert queued == [["s2", "s3"]]


def test_kept_benchmark_weights_round_trip_tied_tensors_and_refuse_another_version(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model with tied embeddings publishes two names for one tensor, which safetensors refuses to
    write as such: each is written, and both come back equal."""
    from types import SimpleNamespace

    from videorl.cluster.benchmark_group import read_plan
    from videorl.cluster.weights import bucket_tensors, publish_buckets
    from videorl.cluster.worker import Worker

    embedding = torch.arange(12, dtype=torch.bfloat16).reshape(4, 3)
    state = {"embed_tokens.weight": embedding, "lm_head.weight": embedding, "norm.weight": torch.ones(3)}
    path = tmp_path / "weights.safetensors"
    plan = {"version": 5, "benchmarks": ["mvbench"], "training": {"step": 5}}
    handle, _ = publish_buckets(state.items(), 1 << 20, lambda array: array)  # the object store: itself
    monkeypatch.setattr(Worker, "published_state", staticmethod(lambda h: bucket_tensors(h, lambda a: a)))
    worker = Worker.__new__(Worker)
    worker.keep_weights(handle, str(path), plan)
    assert read_plan(path) == plan
    loaded: dict[str, torch.Tensor] = {}
    worker.engine = SimpleNamespace(update_weights=loaded.update)  # type: ignore[assignment]
    worker.load_weights_file(str(path), 5)
    assert loaded.keys() == state.keys() and worker.weight_version == 5
    assert all(torch.equal(loaded[k], v) and loaded[k].dtype == v.dtype for k, v in state.items())
    with pytest.raises(ValueError, match="does not hold the weights of policy version 6"):
        worker.load_weights_file(str(path), 6)


def built(cfg: Any) -> Any:
    """The run's algorithm, as the composition root builds it once (installed plugins)."""
    from videorl import algorithms
    from videorl.plugins import load_plugins

    return algorithms.build(cfg.algorithm, load_plugins())


@pytest.mark.parametrize(
    ("errors", "inits"),
    [
        (["Timed out waiting for file /tmp/ray/session_x/gcs_server_port_1"], 2),
        (["Timed out waiting for file a", "Timed out waiting for file b"], 2),
        (["Address already in use"], 1),
    ],
    ids=["gcs-late-once", "gcs-late-twice", "other-failure"],
)
def test_a_local_runtime_that_fails_to_start_is_shut_down_and_a_late_gcs_is_retried_once(
    monkeypatch: pytest.MonkeyPatch, errors: list[str], inits: int
) -> None:
    """A failed ``ray.init`` leaves a half-started node registered in the process, which breaks every
    later start there: each failure is shut down; only a GCS that never reported its port (a loaded
    machine) gets a second start."""
    ray = pytest.importorskip("ray")
    from videorl.cluster.runtime import start_ray

    calls: list[str] = []
    pending = list(errors)

    def init(**options: Any) -> None:
        calls.append("init")
        assert options["address"] == "local"
        assert os.environ["RAY_gcs_server_port_wait_time_s"] == "180"  # noqa: SIM112 (Ray spells it so)
        if pending:
            raise RuntimeError(pending.pop(0))

    for name in ("RAY_AUTH_MODE", "RAY_gcs_server_port_wait_time_s"):  # start_ray sets them: restored after
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    config = load_config(None, [*BASE, "ray.auth=disabled"])
    if len(errors) >= inits:  # every start failed: the last error reaches the caller
        with pytest.raises(RuntimeError, match=re.escape(errors[inits - 1])):
            start_ray(config.ray, None, 1)
    else:
        assert start_ray(config.ray, None, 1) is True
    assert calls == ["init", "shutdown"] * min(len(errors), inits) + ["init"] * (inits - len(errors) > 0)
    # for the start only: Ray also reads it as a count of connection retries, inherited by children
    assert "RAY_gcs_server_port_wait_time_s" not in os.environ
