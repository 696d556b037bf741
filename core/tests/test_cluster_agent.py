"""The Ray controllers (synchronous and asynchronous) driving ``rollout.workflow: tool_agent`` against
workers that answer as real ones would, with no Ray runtime: the rollout worker's episodes come back
as :mod:`videorl.cluster.episode_wire` messages, the reward worker is sent each episode's calls,
mix-policy swaps in the offline trajectory the worker replayed, and the actor worker receives every
episode's segments and replies' requests (the run itself: tests/test_train_ray.py)."""

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
class AgentCluster:
    """Split placement: one actor, rollout and reward worker. Sample ``s<i>``'s group is a called
    episode answering ``[4]`` and a one-turn ``[5]`` (both rewarded 0); its offline trajectory
    answers ``[6]`` (rewarded 1)."""

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


def _sample(i: int) -> Sample:
    return Sample(
        id=f"s{i}", data_type="video", problem="Colour?", problem_type="multiple choice", ground_truth="A",
        videos=[f"/clips/{i}.mp4"], offline_output="<answer>A</answer>",
    )  # fmt: skip


@pytest.mark.parametrize("staleness", [0, 1], ids=["synchronous", "asynchronous"])
def test_the_controllers_drive_tool_agent_episodes_through_the_workers(tmp_path: Any, staleness: int) -> None:
    from videorl import algorithms
    from videorl.cluster.async_driver import AsyncController
    from videorl.cluster.controller import Controller
    from videorl.plugins import load_plugins
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
    algorithm = algorithms.build(config.algorithm, load_plugins())
    driver = AsyncController if staleness else Controller
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
