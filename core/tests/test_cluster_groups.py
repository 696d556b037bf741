"""The actor workers of a Ray run as data × sequence groups (``actor.sequence_parallel_size``), without
a Ray runtime: the layout, which worker rolls out which prompts and receives which episodes, what is
counted once per group, and the checkpoint's data positions (the run itself: tests/test_train_ray.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from videorl.algorithms import build
from videorl.cluster import wire
from videorl.cluster.controller import Controller
from videorl.cluster.groups import ActorGroups
from videorl.cluster.launch import _resume_positions
from videorl.cluster.runtime import WorkerHandle, _groups
from videorl.config import load_config
from videorl.data import Sample
from videorl.errors import ConfigError
from videorl.plugins import load_plugins
from videorl.rollout.collect import rollout_seed
from videorl.runs.checkpoint import Checkpoint
from videorl.timing import StageTimer
from videorl.train.data import TrainData

BASE = ["model.path=/m", "data.train_files=[/d.jsonl]"]


def test_actor_workers_form_data_groups_of_the_sequence_parallel_size() -> None:
    groups = ActorGroups(6, 2)  # workers 0-1, 2-3, 4-5: three data groups, as torchrun ranks
    assert groups.count == 3
    assert [groups.group_of(w) for w in range(6)] == [0, 0, 1, 1, 2, 2]
    assert [groups.leader(g) for g in range(3)] == [0, 2, 4]
    assert groups.to_workers(["a", "b", "c"]) == ["a", "a", "b", "b", "c", "c"]
    assert groups.by_group([10, 11, 20, 21, 30, 31]) == [[10, 11], [20, 21], [30, 31]]
    # colocated: a group's first worker rolls out; split: the rollout workers in turn
    assert [groups.rollout_worker(g, 6, colocated=True) for g in range(3)] == [0, 2, 4]
    assert [groups.rollout_worker(g, 2, colocated=False) for g in range(3)] == [0, 1, 0]
    plain = ActorGroups(3)  # k = 1: every worker a group of its own, as before sequence parallelism
    assert plain.to_workers([1, 2, 3]) == [1, 2, 3] and plain.rollout_worker(2, 3, colocated=True) == 2
    with pytest.raises(ValueError, match="2 item"):
        groups.to_workers(["a", "b"])


@pytest.mark.parametrize(
    ("workers", "k", "divisors"), [(3, 2, "[1, 3]"), (1, 2, "[1]"), (6, 4, "[1, 2, 3, 6]")]
)
def test_actor_workers_that_do_not_form_whole_groups_are_refused_naming_the_sizes_that_work(
    workers: int, k: int, divisors: str
) -> None:
    config = load_config(None, [*BASE, f"ray.actor_workers={workers}", f"actor.sequence_parallel_size={k}"])
    multiples = f"{k}, {2 * k}, {3 * k}, ..."
    with pytest.raises(ConfigError) as err:
        ActorGroups.of(config)
    assert str(err.value) == (
        f"ray.actor_workers={workers} with actor.sequence_parallel_size={k}: the actor workers form data "
        f"groups of {k} that share their samples; set ray.actor_workers to a multiple of {k} ({multiples}) "
        f"or actor.sequence_parallel_size to one of {divisors}"
    )


def test_split_rollout_and_reference_workers_default_to_one_per_data_group() -> None:
    config = load_config(
        None,
        [*BASE, "ray.placement=split", "ray.actor_workers=4", "actor.sequence_parallel_size=2",
         "algorithm.use_kl_loss=true"],
    )  # fmt: skip
    assert [g[:3] for g in _groups(config)] == [
        ("actor", ["actor"], 4),
        ("rollout", ["rollout"], 2),
        ("reference", ["reference"], 2),
        ("reward", ["reward"], 1),
    ]


@dataclass
class GroupedCluster:
    """Four actor workers (two data groups of two), colocated or beside two rollout workers, and a
    reward worker answering as workers would; every call recorded as ``(worker, method, request)``. A
    worker's actor loss is its index."""

    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    actors: list[WorkerHandle] = field(
        default_factory=lambda: [WorkerHandle(f"actor-{i}", ["actor", "rollout"], None) for i in range(4)]
    )
    rewards: list[WorkerHandle] = field(default_factory=lambda: [WorkerHandle("reward-0", ["reward"], None)])
    references: list[WorkerHandle] = field(default_factory=list)
    colocated: bool = True

    @property
    def rollouts(self) -> list[WorkerHandle]:
        return (
            self.actors
            if self.colocated
            else [WorkerHandle(f"rollout-{i}", ["rollout"], None) for i in range(2)]
        )

    def call(
        self, stage: str, step: int, calls: list[tuple[WorkerHandle, str, tuple[Any, ...]]]
    ) -> list[Any]:
        out: list[Any] = []
        for worker, method, args in calls:
            if not args or not isinstance(args[0], bytes):  # checkpoints and (split) weight sync
                self.calls.append((worker.name, method, args))
                out.append({"publish_weights": [None, 0], "load_weights": 0.0}.get(method))
                continue
            request = wire.loads(args[0])
            self.calls.append((worker.name, method, request))
            out.append(wire.dumps(self._reply(worker.name, method, request)))
        return out

    @staticmethod
    def _reply(worker: str, method: str, request: dict[str, Any]) -> Any:
        if method == "generate":  # sample s<i>'s responses: [i] rewarded 1 and [i, i] rewarded 0
            ids = [int(s[1:]) for s in request["ids"]]
            groups = [[[[i], [-0.5], "stop"], [[i, i], [-0.5, -0.5], "stop"]] for i in ids]
            return {
                "media": [None] * len(ids),
                "completions": groups,
                "version": 0,
                "seconds": {"rollout": 2.0},
            }
        if method == "score":
            return [[1.0 if len(ids) == 1 else 0.0, {}] for _, _, ids in request["items"]]
        rank = int(worker[-1])  # update
        return {"metrics": {"actor/loss": float(rank)}, "seconds": {"actor": 1.0 + rank}}


def _sample(i: int) -> Sample:
    return Sample(id=f"s{i}", data_type="video", problem="?", problem_type="free-form", ground_truth="A",
                  videos=[f"/clips/{i}.mp4"])  # fmt: skip


@pytest.mark.parametrize(
    ("placement", "rollout_workers"),
    [("colocated", ["actor-0", "actor-2"]), ("split", ["rollout-0", "rollout-1"])],
)
def test_a_data_group_rolls_out_once_and_its_workers_train_on_the_same_episodes(
    placement: str, rollout_workers: list[str]
) -> None:
    config = load_config(
        None,
        [*BASE, "ray.actor_workers=4", "actor.sequence_parallel_size=2", "rollout.n=2",
         "data.rollout_batch_size=4", "actor.global_batch_size=4", "rollout.parity_check=off"],
    )  # fmt: skip
    samples = [_sample(i) for i in range(8)]
    data = [TrainData(samples, seed=0, shuffle=False, rank=g, world_size=2) for g in range(2)]
    cluster = GroupedCluster(colocated=placement == "colocated")
    backend = type("Backend", (), {"forbidden_token_ids": lambda self: set()})()
    algorithm = build(config.algorithm, load_plugins())
    controller = Controller(config, cluster, backend, data, [], algorithm=algorithm)  # type: ignore[arg-type]
    timer = StageTimer()
    try:
        metrics = controller.step_once(1, timer)
        controller.save(1)
    finally:
        controller.close()

    # each group's 2 prompts rolled out once (colocated: on its first worker) with its data rank's seed
    generated = sorted((w, r["ids"], r["seed"]) for w, m, r in cluster.calls if m == "generate")
    assert generated == [
        (rollout_workers[0], ["s0", "s2"], rollout_seed(config, 1, 0, 0)),
        (rollout_workers[1], ["s1", "s3"], rollout_seed(config, 1, 0, 1)),
    ]
    updates = {w: r["items"] for w, m, r in cluster.calls if m == "update"}
    assert sorted(updates) == ["actor-0", "actor-1", "actor-2", "actor-3"]
    assert updates["actor-0"] == updates["actor-1"] and updates["actor-2"] == updates["actor-3"]
    assert [row[0] for row in updates["actor-0"]] == ["s0", "s0", "s2", "s2"]
    assert [row[0] for row in updates["actor-2"]] == ["s1", "s1", "s3", "s3"]
    # the episodes counted once per group: 8 responses, half rewarded; the actor metrics over 4 workers
    assert metrics["reward/overall"] == 0.5 and metrics["actor/loss"] == 1.5
    assert metrics["response_length/mean"] == 1.5
    # a group's stage times once: rollout 2 s each; update the mean of its workers' (1.5 and 3.5)
    assert timer.seconds["rollout"] == 2.0 and timer.seconds["actor"] == 2.5
    saves = [(w, args) for w, m, args in cluster.calls if m == "save_checkpoint"]
    positions = [d.state_dict() for d in data]
    assert saves == [(f"actor-{w}", (1, positions[w // 2])) for w in range(4)]


def test_each_data_group_resumes_at_its_position_and_another_k_maps_them(tmp_path: Path) -> None:
    ranks = [
        {"epoch": 0, "index": 2},
        {"epoch": 0, "index": 2},
        {"epoch": 1, "index": 4},
        {"epoch": 1, "index": 4},
    ]
    written = Checkpoint(tmp_path, 3, data_state={"ranks": ranks, "sequence_parallel_size": 2})
    samples = [_sample(i) for i in range(8)]
    data = [TrainData(samples, seed=0, rank=g, world_size=2) for g in range(2)]
    _resume_positions(written, ActorGroups(4, 2), data)
    assert [d.state_dict() for d in data] == [{"epoch": 0, "index": 2}, {"epoch": 1, "index": 4}]
    # groups at different places (dynamic sampling) map to no other number of groups
    with pytest.raises(ConfigError, match=r"resume it with 2 data groups"):
        _resume_positions(
            written, ActorGroups(4, 1), [TrainData(samples, seed=0, rank=g, world_size=4) for g in range(4)]
        )
    # 4 workers at k=2 after 3 steps of 2 prompts (3 each), resumed at k=1: 4 groups take 6 together
    even = Checkpoint(
        tmp_path, 3, data_state={"ranks": [{"epoch": 0, "index": 3}] * 4, "sequence_parallel_size": 2}
    )
    samples = [_sample(i) for i in range(12)]
    four = [TrainData(samples, seed=0, rank=g, world_size=4) for g in range(4)]
    _resume_positions(even, ActorGroups(4, 1), four)
    assert [d.state_dict() for d in four] == [{"epoch": 0, "index": 2}] * 2 + [{"epoch": 0, "index": 1}] * 2
    with pytest.raises(
        ConfigError, match=r"written by 4 rank\(s\); resume it with ray.actor_workers=4 \(now 2\)"
    ):
        _resume_positions(written, ActorGroups(2, 2), data[:1])
