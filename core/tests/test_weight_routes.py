"""Where a weight refresh goes through (issue 28 item 6): an engine refreshed by CUDA IPC gets the
weights as they are gathered (never a host copy), any other the host dict, and every rank walks the
same gathers to the end; in Ray split placement only actor rank 0 keeps the weights, and they travel
as flat numpy buffers per bucket, not a pickled state dict."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from videorl.actor.policy import Actor, refresh_engine
from videorl.cluster.weights import bucket_tensors, publish_buckets
from videorl.generation import EngineCapabilities


class _Gathers:
    """An FSDP-like ``full_state``: counts the gathers (one per tensor) and records the arguments."""

    def __init__(self, state: dict[str, torch.Tensor]) -> None:
        self.state, self.gathered, self.calls = state, 0, []  # type: ignore[var-annotated]

    def __call__(self, dtype: Any, *, on_device: bool, keep: bool) -> Iterator[tuple[str, torch.Tensor]]:
        self.calls.append({"dtype": dtype, "on_device": on_device, "keep": keep})
        for name, tensor in self.state.items():
            self.gathered += 1
            if keep:
                yield name, tensor if dtype is None else tensor.to(dtype)


def _actor(gathers: _Gathers) -> Actor:
    model = torch.nn.Linear(1, 1)
    return Actor(model, torch.optim.SGD(model.parameters(), lr=0.1), None, full_state=gathers)  # type: ignore[arg-type]


_STATE = {"a": torch.arange(6.0).reshape(2, 3), "b": torch.ones(5), "c": torch.tensor([3, 4])}


class _StreamEngine:
    capabilities = EngineCapabilities(weights_layout="transformers")
    weights_dtype = torch.bfloat16

    def __init__(self, takes: bool, fail_after: int | None = None) -> None:
        self.takes, self.fail_after = takes, fail_after
        self.streamed: list[str] = []
        self.dict: dict[str, torch.Tensor] | None = None

    def takes_device_weights(self) -> bool:
        return self.takes

    def update_weights(self, state: dict[str, torch.Tensor]) -> None:
        self.dict = dict(state)

    def update_weights_stream(self, named: Iterator[tuple[str, torch.Tensor]]) -> None:
        for name, tensor in named:
            assert tensor.dtype in (torch.bfloat16, torch.int64)
            self.streamed.append(name)
            if self.fail_after is not None and len(self.streamed) == self.fail_after:
                raise RuntimeError("engine failed midway")


def test_a_cuda_ipc_engine_is_streamed_the_gathered_tensors_on_the_device() -> None:
    gathers = _Gathers(_STATE)
    engine = _StreamEngine(takes=True)
    refresh_engine(_actor(gathers), engine)  # type: ignore[arg-type]
    assert engine.streamed == ["a", "b", "c"] and engine.dict is None
    assert gathers.calls == [{"dtype": torch.bfloat16, "on_device": True, "keep": True}]


def test_another_engine_gets_the_host_dict_from_the_same_gathers() -> None:
    gathers = _Gathers(_STATE)
    engine = _StreamEngine(takes=False)
    refresh_engine(_actor(gathers), engine)  # type: ignore[arg-type]
    assert engine.dict is not None and sorted(engine.dict) == ["a", "b", "c"] and not engine.streamed
    assert gathers.calls == [{"dtype": torch.bfloat16, "on_device": False, "keep": True}]
    assert gathers.gathered == 3


def test_an_engine_failing_midway_still_has_every_gather_run_for_the_other_ranks() -> None:
    gathers = _Gathers(_STATE)
    engine = _StreamEngine(takes=True, fail_after=1)
    with pytest.raises(RuntimeError, match="midway"):
        refresh_engine(_actor(gathers), engine)  # type: ignore[arg-type]
    assert engine.streamed == ["a"] and gathers.gathered == 3  # b and c gathered and dropped


def test_a_tensor_parallel_rank_without_the_engine_runs_the_gathers_and_keeps_nothing() -> None:
    from videorl.rollout.placement import GroupedEngine

    gathers = _Gathers(_STATE)
    follower = GroupedEngine.__new__(GroupedEngine)
    follower.engine = None
    refresh_engine(_actor(gathers), follower)
    assert gathers.gathered == 3 and gathers.calls == [{"dtype": None, "on_device": True, "keep": False}]


def test_split_buckets_are_flat_uint8_buffers_each_within_the_size_and_round_trip() -> None:
    """40-byte float32 tensors (48 aligned) in 100-byte buckets: two per bucket; bf16 kept bit-exact."""
    named = [(f"t{i}", torch.arange(10, dtype=torch.float32) + i) for i in range(5)]
    named.append(("h", torch.tensor([1.5, -2.25], dtype=torch.bfloat16)))  # 4 bytes -> 16
    put: list[Any] = []

    def store(array: Any) -> int:
        put.append(array)
        return len(put) - 1

    handle, total = publish_buckets(iter(named), 100, store)
    assert [len(meta["names"]) for _, meta in handle] == [2, 2, 2]  # t0 t1 | t2 t3 | t4 h
    assert total == 48 * 5 + 16
    assert all(type(a) is np.ndarray and a.dtype == np.uint8 and a.ndim == 1 for a in put)
    assert [a.size for a in put] == [96, 96, 64]
    state = bucket_tensors(handle, lambda ref: put[ref])
    assert list(state) == [n for n, _ in named]
    assert all(torch.equal(state[n], t) and state[n].dtype == t.dtype for n, t in named)


def test_only_actor_rank_0_keeps_and_publishes_the_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 runs every gather (the collective) without keeping a tensor or putting anything."""
    ray = pytest.importorskip("ray")
    from types import SimpleNamespace

    from videorl.cluster.worker import Worker
    from videorl.config import load_config

    puts: list[Any] = []

    def put(value: Any) -> str:
        puts.append(value)
        return f"ref{len(puts)}"

    monkeypatch.setattr(ray, "put", put)
    replies = {}
    for rank in (1, 0):
        gathers = _Gathers(_STATE)
        worker = Worker.__new__(Worker)
        worker.rank, worker.actor = rank, _actor(gathers)
        worker.config = load_config(
            None,
            ["model.path=/m", "data.train_files=[x.jsonl]", "rollout.engine=vllm", "model.dtype=bfloat16"],
        )
        worker.plugins = SimpleNamespace(rollout_engines={"vllm": _StreamEngine})  # type: ignore[assignment]
        replies[rank] = worker.publish_weights()
        assert gathers.gathered == 3 and gathers.calls[0]["keep"] == (rank == 0)
        assert gathers.calls[0]["on_device"] is True  # rank 0 packs from the GPU straight into the buckets
        if rank == 1:
            assert replies[1] is None and puts == []
    handle, total = replies[0]  # type: ignore[misc]
    assert len(puts) == 1 and [ref for ref, _ in handle] == ["ref1"] and isinstance(puts[0], np.ndarray)
    # in the engine's bfloat16: a 6 x 2 = 12 -> 16 bytes, b 5 x 2 = 10 -> 16, c (int64) 2 x 8 = 16
    assert total == 48 and puts[0].size == 48


_OBJECT_STORE_CHECK = """
import numpy as np, ray, torch
from videorl.cluster.weights import bucket_tensors, publish_buckets
ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
named = [("w", torch.arange(64, dtype=torch.bfloat16).reshape(8, 8)), ("b", torch.ones(3))]
handle, total = publish_buckets(iter(named), 1 << 20, ray.put)
assert total == 128 + 16 and len(handle) == 1, (total, handle)
array = ray.get(handle[0][0])
assert type(array) is np.ndarray and not array.flags.writeable, "unpickled, not mapped"
state = bucket_tensors(handle, ray.get)
assert all(torch.equal(state[n], t) and state[n].dtype == t.dtype for n, t in named)
ray.shutdown()
print("ok")
"""


@pytest.mark.slow
def test_buckets_go_through_ray_s_object_store_as_buffers_read_without_a_copy() -> None:
    """Each bucket is a numpy array in the object store: a reader gets it mapped read-only (Ray's
    zero-copy path for numpy buffers), and the views over it are the published tensors.

    In a process of its own: a Ray runtime started and shut down in the test process leaves state
    there that made a later module's in-process runtime cancel its actors before they started."""
    pytest.importorskip("ray")
    env = {
        **os.environ,
        "RAY_gcs_server_port_wait_time_s": "180",  # as cluster/runtime.py, for a loaded 2-core machine
        "RAY_AUTH_MODE": "disabled",
        "OMP_NUM_THREADS": "1",
    }
    # address="local": a new runtime, even where `ray start` in an earlier test left a cluster's record
    done = subprocess.run(
        [sys.executable, "-c", _OBJECT_STORE_CHECK], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-4000:]
