"""The Ray controllers (synchronous and asynchronous) in split placement against stand-in workers that
answer as real ones would, with no Ray runtime: ReMax's greedy baseline, and ``rollout.workflow:
tool_agent`` — the rollout worker's episodes come back as :mod:`videorl.cluster.episode_wire` messages,
the reward worker is sent each episode's calls, mix-policy swaps in the offline trajectory the worker
replayed, and the actor worker receives every episode's segments and replies' requests (the runs
themselves: tests/test_train_ray.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from videorl.cluster import wire
from videorl.cluster.runtime import WorkerHandle
from videorl.config import load_config
from videorl.data import Sample

CALL = ["get_frames", {"start": 0, "end": 1, "n": 2}, 1, False, 2, None]


def _request(i: int) -> dict[str, Any]:
    return {"tool": "get_frames", "arguments": CALL[1], "text": "2 frames:", "frames": 2,
            "video": f"/clips/{i}.mp4", "max_frames": 16}  # fmt: skip


def _called(i: int, answer: int, logprob: float, offline: bool = False) -> dict[str, Any]:
    """A call, its reply (2 tokens, loss mask 0), the answer ``[answer]``."""
    segments = [
        [True, [7], [logprob], [], None],
        [False, [8, 9], [math.nan, math.nan], ["video:frames=1,3"], _request(i)],
        [True, [answer], [logprob], [], None],
    ]
    return {"segments": segments, "calls": [CALL], "end": "stop", "offline": offline}


@dataclass
class SplitCluster:
    """One actor, one rollout and one reward worker (split placement, so weights are published and
    loaded between steps); every wire call recorded as ``(method, request)``, answered by ``_reply``."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    actors: list[WorkerHandle] = field(default_factory=lambda: [WorkerHandle("actor-0", ["actor"], None)])
    rollouts: list[WorkerHandle] = field(
        default_factory=lambda: [WorkerHandle("rollout-0", ["rollout"], None)]
    )
    rewards: list[WorkerHandle] = field(default_factory=lambda: [WorkerHandle("reward-0", ["reward"], None)])
    references: list[WorkerHandle] = field(default_factory=list)
    colocated: bool = False
    version: int = 0

    def call(
        self, stage: str, step: int, calls: list[tuple[WorkerHandle, str, tuple[Any, ...]]]
    ) -> list[Any]:
        out: list[Any] = []
        for _, method, args in calls:
            if method == "publish_weights":
                out.append([step, 100])
            elif method == "load_weights":
                self.version = args[1]
                out.append(0.0)
            elif method == "save_checkpoint":
                out.append(None)
            else:
                request = wire.loads(args[0])
                self.calls.append((method, request))
                out.append(wire.dumps(self._reply(method, request)))
        return out

    def _reply(self, method: str, r: dict[str, Any]) -> Any:
        raise NotImplementedError


class GreedyCluster(SplitCluster):
    """A sampled group is ``[4], [5]`` (rewards 1 and 0); sample ``s<i>``'s greedy response is
    ``[10 + i]``, rewarded ``0.25 (i + 1)``."""

    def _reply(self, method: str, r: dict[str, Any]) -> Any:
        if method == "generate":
            groups = [[[[4], [-0.5], "stop"], [[5], [-0.5], "stop"]] for _ in r["ids"]]
            greedy = [[[10 + int(sid[1:])], [-0.1], "stop"] for sid in r["ids"]]
            reply = {"media": [None] * len(r["ids"]), "completions": groups, "version": self.version,
                     "seconds": {"rollout": 0.1}}  # fmt: skip
            return {**reply, "baseline": greedy} if r.get("baseline") else reply
        if method == "score":
            return [[{4: 1.0, 5: 0.0}.get(ids[0], 0.25 * (ids[0] - 9)), {}] for _, _, ids in r["items"]]
        assert method == "update"
        return {"metrics": {"actor/loss": 0.5}, "seconds": {"actor": 0.2}}


class AgentCluster(SplitCluster):
    """Sample ``s<i>``'s group is a called episode answering ``[4]`` and a one-turn ``[5]`` (both rewarded
    0); its offline trajectory answers ``[6]`` (rewarded 1)."""

    def _reply(self, method: str, r: dict[str, Any]) -> Any:
        if method == "generate_episodes":
            n = [int(sid[1:]) for sid in r["ids"]]
            one_turn = {
                "segments": [[True, [5], [-0.5], [], None]],
                "calls": [],
                "end": "length",
                "offline": False,
            }
            return {
                "media": [None] * len(n),
                "groups": [[_called(i, 4, -0.5), one_turn] for i in n],
                "offline": [_called(i, 6, math.nan, offline=True) if r["offline"] else None for i in n],
                "metrics": {"tool/turns_per_episode": 1.5, "tool/calls/get_frames": 2.0},
                "version": self.version,
                "seconds": {"data": 0.1, "rollout": 0.2},
            }
        if method == "score":
            return [[float(ids == [6]), {"accuracy": float(ids == [6])}] for _, _, ids, *_ in r["items"]]
        assert method == "update"
        return {"metrics": {"actor/loss": 0.5}, "seconds": {"actor": 0.2}}


def _algorithm(config: Any) -> Any:
    """The run's algorithm, as the composition root builds it once (installed plugins)."""
    from videorl import algorithms
    from videorl.plugins import load_plugins

    return algorithms.build(config.algorithm, load_plugins())


def _sample(i: int) -> Sample:
    return Sample(
        id=f"s{i}", data_type="video", problem="Colour?", problem_type="multiple choice", ground_truth="A",
        videos=[f"/clips/{i}.mp4"], offline_output="<answer>A</answer>",
    )  # fmt: skip


@pytest.mark.parametrize("staleness", [0, 1], ids=["synchronous", "asynchronous"])
def test_greedy_baseline_is_generated_scored_and_left_out_of_the_update(
    tmp_path: Any, staleness: int
) -> None:
    """ReMax on Ray: with each rollout the controller asks the rollout worker, in the same call, for
    one greedy response per prompt (the estimator asks, the controller does not know which one runs),
    scores it on the reward worker, and its reward is the baseline of the advantages the actor trains
    on; the greedy responses themselves never reach the update. The asynchronous driver collects the
    same way."""
    from videorl.cluster.async_driver import AsyncController
    from videorl.cluster.controller import Controller
    from videorl.runs.checkpoint import CheckpointManager
    from videorl.train.data import TrainData
    from videorl.train.loop import RunIO, run

    asynchronous = ["trainer.max_staleness=1", "algorithm.rollout_correction=tis"] if staleness else []
    config = load_config(
        None,
        ["model.path=/m", "data.train_files=[/d.jsonl]", "algorithm.preset=remax", "ray.placement=split",
         "rollout.n=2", "data.rollout_batch_size=2",
         "actor.global_batch_size=2", "trainer.max_steps=2", "trainer.save_every=0",
         "rollout.parity_check='off'", *asynchronous],
    )  # fmt: skip
    cluster = GreedyCluster()
    data = [TrainData([_sample(i) for i in range(4)], seed=0, shuffle=False)]
    backend = type("Backend", (), {"forbidden_token_ids": lambda self: set()})()
    driver = AsyncController if staleness else Controller
    controller = driver(config, cluster, backend, data, [], algorithm=_algorithm(config))  # type: ignore[arg-type]
    rows: list[dict[str, float]] = []
    try:
        run(config, controller, RunIO(CheckpointManager(tmp_path)), 0, on_step=lambda s, m: rows.append(m))
    finally:
        controller.close()

    generated = [
        (r["step"], r["ids"], r["greedy"], r.get("baseline")) for m, r in cluster.calls if m == "generate"
    ]
    # one call per rollout: sampled responses, and one greedy response per prompt with the same weights
    assert generated == [(1, ["s0", "s1"], False, True), (2, ["s2", "s3"], False, True)]
    scored = [ids[0] for m, r in cluster.calls if m == "score" for _, _, ids in r["items"]]
    assert sorted(scored) == [4, 4, 4, 4, 5, 5, 5, 5, 10, 11, 12, 13]  # every response, greedy ones too
    updates = [r for m, r in cluster.calls if m == "update"]
    trained = [[(sid, c[0], adv) for sid, _, c, _, adv, _ in u["items"]] for u in updates]
    # advantage = reward - the prompt's greedy reward 0.25 (i + 1): s0 0.25, s1 0.5, s2 0.75, s3 1.0
    assert trained == [
        [("s0", [4], 0.75), ("s0", [5], -0.25), ("s1", [4], 0.5), ("s1", [5], -0.5)],
        [("s2", [4], 0.25), ("s2", [5], -0.75), ("s3", [4], 0.0), ("s3", [5], -1.0)],
    ]
    assert [row["reward/overall"] for row in rows] == [0.5, 0.5]  # the sampled responses only


@pytest.mark.parametrize("staleness", [0, 1], ids=["synchronous", "asynchronous"])
def test_the_controllers_drive_tool_agent_episodes_through_the_workers(tmp_path: Any, staleness: int) -> None:
    from videorl.cluster.async_driver import AsyncController
    from videorl.cluster.controller import Controller
    from videorl.runs.checkpoint import CheckpointManager
    from videorl.train.data import TrainData
    from videorl.train.loop import RunIO, run

    asynchronous = ["trainer.max_staleness=1", "algorithm.rollout_correction=tis"] if staleness else []
    config = load_config(
        None,
        ["model.path=/m", "data.train_files=[/d.jsonl]", "rollout.workflow=tool_agent",
         "rollout.tools=[get_frames]", "rollout.enable_mix_policy=true", "ray.placement=split",
         "rollout.n=2", "data.rollout_batch_size=2", "actor.global_batch_size=2", "trainer.max_steps=2",
         "trainer.save_every=0", "rollout.parity_check='off'", "rollout.max_frames_per_call=16",
         *asynchronous],
    )  # fmt: skip
    cluster = AgentCluster()
    data = [TrainData([_sample(i) for i in range(4)], seed=0, shuffle=False)]
    driver = AsyncController if staleness else Controller
    algorithm = _algorithm(config)
    controller = driver(config, cluster, None, data, [], algorithm=algorithm, agent=True)  # type: ignore[arg-type]
    rows: list[dict[str, float]] = []
    try:
        run(config, controller, RunIO(CheckpointManager(tmp_path)), 0, on_step=lambda s, m: rows.append(m))
    finally:
        controller.close()

    asked = [(r["step"], r["ids"], r["offline"]) for m, r in cluster.calls if m == "generate_episodes"]
    assert asked == [(1, ["s0", "s1"], True), (2, ["s2", "s3"], True)]
    assert not [m for m, _ in cluster.calls if m == "generate"]
    scored = [(ids, calls) for m, r in cluster.calls if m == "score" for _, _, ids, *calls in r["items"]]
    # each episode with its calls: the sampled ones, then the offline ones mix-policy took
    assert scored[:4] == [([4], [[CALL]]), ([5], [[]]), ([4], [[CALL]]), ([5], [[]])]
    assert scored[4:6] == [([6], [[CALL]]), ([6], [[CALL]])]
    (first, _) = [r for m, r in cluster.calls if m == "update"]
    trained = [
        (sid, episode["segments"][-1][1], episode["offline"]) for sid, _, episode, *_ in first["items"]
    ]
    assert trained == [("s0", [4], False), ("s0", [6], True), ("s1", [4], False), ("s1", [6], True)]
    reply = first["items"][1][2]["segments"][1]
    assert reply[0] is False and reply[4] == _request(0)  # the request the actor rebuilds the reply from
    for row in rows:
        assert row["tool/turns_per_episode"] == 1.5 and row["tool/calls/get_frames"] == 2.0
        assert row["mix_policy/offline_replaced_groups"] == 2.0
        assert row["reward/overall"] == 0.0 and row["offline/reward"] == 1.0  # the policy's; the replays'
    if staleness:
        assert rows[1]["async/staleness_max"] <= 1
