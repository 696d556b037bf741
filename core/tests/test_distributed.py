"""What each training process sets up for GPUs, checked without one: the process group's backends,
each rank's rollout-engine devices and tensor-parallel group, the engines' platform defaults, and
when the CUDA cache is returned to the device."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch

from videorl.actor.build import fused_adamw_options
from videorl.devices import attention_implementation
from videorl.errors import ConfigError
from videorl.parallel import backend_devices, process_group_options
from videorl.rollout.placement import EnginePlacement, engine_placement
from videorl.rollout.vllm_common import engine_process_environment, platform_defaults


def test_the_gpu_process_group_serves_cpu_and_cuda_tensors() -> None:
    """The loop's counts and checkpoint objects are CPU tensors: an NCCL-only group refuses them."""
    options = process_group_options(cuda=True, local_rank=5)
    assert options["backend"] == "cpu:gloo,cuda:nccl"
    assert backend_devices(options["backend"]) == {"cpu", "cuda"}
    assert options["device_id"] == torch.device("cuda", 5)
    assert options["timeout"] >= timedelta(hours=1)  # rank 0 writes a checkpoint while the others wait
    cpu = process_group_options(cuda=False, local_rank=0)
    assert cpu["backend"] == "gloo" and "device_id" not in cpu
    assert backend_devices("nccl") == {"cuda"}  # what the group was before: no CPU backend


def _layout(world: int, per_node: int, tp: int, visible: str | None = None) -> list[EnginePlacement]:
    return [
        engine_placement(
            rank=r,
            world_size=world,
            local_rank=r % per_node,
            local_world_size=per_node,
            tensor_parallel_size=tp,
            visible_devices=visible,
        )
        for r in range(world)
    ]


def test_eight_ranks_tensor_parallel_1_each_rank_its_own_gpu() -> None:
    layout = _layout(8, 8, 1)
    assert [p.visible_devices for p in layout] == [str(i) for i in range(8)]
    assert all(p.hosts_engine and p.group == (p.rank,) for p in layout)


def test_eight_ranks_tensor_parallel_2_and_4_one_engine_per_group() -> None:
    two = _layout(8, 8, 2)
    assert [p.group for p in two] == [(0, 1), (0, 1), (2, 3), (2, 3), (4, 5), (4, 5), (6, 7), (6, 7)]
    assert [p.rank for p in two if p.hosts_engine] == [0, 2, 4, 6]
    assert [p.visible_devices for p in two if p.hosts_engine] == ["0,1", "2,3", "4,5", "6,7"]
    four = _layout(8, 8, 4)
    assert [p.group for p in four] == [(0, 1, 2, 3)] * 4 + [(4, 5, 6, 7)] * 4
    assert [(p.rank, p.visible_devices) for p in four if p.hosts_engine] == [(0, "0,1,2,3"), (4, "4,5,6,7")]
    # every GPU of the node belongs to exactly one engine
    for layout in (_layout(8, 8, 1), two, four):
        gpus = [d for p in layout if p.hosts_engine for d in (p.visible_devices or "").split(",")]
        assert sorted(gpus, key=int) == [str(i) for i in range(8)]


def test_placement_follows_the_job_s_visible_devices_and_nodes() -> None:
    # 2 nodes x 4 GPUs, the job on physical GPUs 4-7 of each node, TP 2
    layout = _layout(8, 4, 2, visible="4,5,6,7")
    assert [(p.rank, p.group, p.visible_devices) for p in layout if p.hosts_engine] == [
        (0, (0, 1), "4,5"),
        (2, (2, 3), "6,7"),
        (4, (4, 5), "4,5"),
        (6, (6, 7), "6,7"),
    ]
    with pytest.raises(ConfigError, match="must divide the processes per node"):
        _layout(8, 8, 3)
    with pytest.raises(ConfigError, match="ray.placement=split"):  # a Ray worker holds one GPU
        engine_placement(rank=0, world_size=2, local_rank=0, local_world_size=1, tensor_parallel_size=2)
    cpu = engine_placement(
        rank=3, world_size=4, local_rank=3, local_world_size=4, tensor_parallel_size=1, cuda=False
    )
    assert cpu.visible_devices is None and cpu.hosts_engine
    one = engine_placement(rank=0, world_size=1, local_rank=0, local_world_size=1, tensor_parallel_size=2)
    assert one.visible_devices is None and one.group == (0,)  # one process: vLLM picks its GPUs


def test_engine_processes_see_only_their_gpus_and_no_torchrun_variables(monkeypatch: Any) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setenv("MASTER_PORT", "29500")
    with engine_process_environment("2,3"):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"
        assert not {"RANK", "LOCAL_RANK", "MASTER_PORT"} & set(os.environ)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and os.environ["RANK"] == "2"
    assert os.environ["MASTER_PORT"] == "29500"
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    with (
        pytest.raises(ConfigError, match="VLLM_ENABLE_V1_MULTIPROCESSING=0"),
        engine_process_environment("2"),
    ):
        pass
    with engine_process_environment(None):  # one process, or the CPU build: nothing changes
        assert os.environ["RANK"] == "2"


class _Platform:
    def __init__(self, cpu: bool, sleep: bool) -> None:
        self.cpu, self.sleep = cpu, sleep

    def is_cpu(self) -> bool:
        return self.cpu

    def is_sleep_mode_available(self) -> bool:
        return self.sleep


def test_engine_defaults_per_platform() -> None:
    assert platform_defaults(_Platform(cpu=False, sleep=True)) == {
        "enforce_eager": False,
        "enable_sleep_mode": True,
    }
    assert platform_defaults(_Platform(cpu=True, sleep=False)) == {
        "enforce_eager": True,
        "enable_sleep_mode": False,
    }
    assert fused_adamw_options(torch.device("cuda", 3)) == {"fused": True}
    assert fused_adamw_options(torch.device("cpu")) == {}


def test_the_cuda_cache_is_returned_before_the_engine_wakes(monkeypatch: Any) -> None:
    """The engine's processes see only what this process's allocator gave back."""
    from videorl.rollout.vllm import VLLMEngine

    events: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: events.append("empty_cache"))

    class LLM:
        def sleep(self, level: int) -> None:
            events.append(f"sleep {level}")

        def wake_up(self, tags: list[str]) -> None:
            events.append(f"wake {tags[0]}")

        def collective_rpc(self, name: str, kwargs: dict[str, Any]) -> None:
            events.append(name)

        def reset_prefix_cache(self) -> None:
            events.append("reset prefix cache")

        @property
        def llm_engine(self) -> Any:
            return type(
                "Engine", (), {"reset_encoder_cache": lambda _: events.append("reset encoder cache")}
            )()

    class Folder:
        def write(self, state: Any) -> str:
            return "/dev/shm/x"

    engine = VLLMEngine.__new__(VLLMEngine)
    engine.llm, engine._weights, engine.sleep_mode, engine.asleep = LLM(), Folder(), True, False
    engine.weight_sync = "folder"
    engine.sleep()
    engine.update_weights({})
    assert events == [
        "sleep 2", "empty_cache", "wake weights", "reload_weights", "empty_cache", "wake kv_cache",
        "reset prefix cache", "reset encoder cache",
    ]  # fmt: skip


def test_flash_attention_where_it_runs(monkeypatch: Any) -> None:
    import importlib.util

    installed = {"flash_attn": True}
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if installed.get(name) else None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert attention_implementation(torch.bfloat16) == "flash_attention_2"
    assert attention_implementation(torch.float32) is None  # no float32 kernels: sdpa
    installed["flash_attn"] = False
    assert attention_implementation(torch.bfloat16) is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    installed["flash_attn"] = True
    assert attention_implementation(torch.bfloat16) is None


_GROUPED_RANK = """
import json, sys
import torch, torch.distributed as dist
from videorl.model_inputs import EncodedPrompt
from videorl.rollout import Completion, SamplingParams
from videorl.generation import EngineCapabilities
from videorl.rollout.placement import GroupedEngine, engine_placement

class LabelEngine:  # answers each prompt with its sample id's length, recording what it was asked
    def __init__(self):
        self.asked = []
    def generate(self, prompts, params):
        self.asked += [p.sample_id for p in prompts]
        assert all(p.visual == {} for p in prompts)  # the pixels stay home
        return [[Completion([len(p.sample_id)] * params.n, [0.0] * params.n, "stop")] for p in prompts]

rank, init, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=2)
placement = engine_placement(rank=rank, world_size=2, local_rank=rank, local_world_size=2,
                             tensor_parallel_size=2, cuda=False)
engine = LabelEngine() if placement.hosts_engine else None
grouped = GroupedEngine(engine, placement, dist.new_group([0, 1]), None, EngineCapabilities())
ids = ["a", "bbb"] if rank == 0 else ["cc", "dddd", "eeeee"]
prompts = [EncodedPrompt(i, [1], None, {"pixel_values": torch.ones(2)}, [1], None) for i in ids]
got = grouped.generate(prompts, SamplingParams(n=2))
with open(f"{out}/rank{rank}.json", "w") as f:
    json.dump({"tokens": [g[0].token_ids for g in got], "asked": engine.asked if engine else None}, f)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_tensor_parallel_group_generates_on_its_leader_and_each_rank_gets_its_own(tmp_path: Any) -> None:
    import json
    import subprocess
    import sys

    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _GROUPED_RANK, str(r), str(tmp_path / "pg"), str(tmp_path)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["asked"] == [
        "a",
        "bbb",
        "cc",
        "dddd",
        "eeeee",
    ]  # the leader generated the group's prompts
    assert ranks[0]["tokens"] == [[1, 1], [3, 3]] and ranks[1]["tokens"] == [[2, 2], [4, 4], [5, 5]]
    assert ranks[1]["asked"] is None  # rank 1 holds no engine


def test_cuda_rng_state_is_this_rank_s_device_only(monkeypatch: Any) -> None:
    """A torchrun rank sees 8 GPUs, a Ray worker 1: a checkpoint holding every visible device's RNG
    state could not be resumed on Ray."""
    from videorl.runs.tensors import capture_rng_state, restore_rng_state

    device_state = torch.tensor([7, 8, 9], dtype=torch.uint8)
    restored: list[list[int]] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": device_state)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [device_state] * 8)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, device="cuda": restored.append(s.tolist()))
    state = capture_rng_state()
    assert state["cuda"] == [[7, 8, 9]]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # resumed in a Ray worker
    restore_rng_state(state)
    assert restored == [[7, 8, 9]]


def test_refreshed_weights_are_gathered_in_the_engine_s_dtype() -> None:
    """A bf16 vLLM engine's refresh needs half the host memory (and /dev/shm) of a float32 one."""
    from videorl.actor.policy import Actor, refresh_state
    from videorl.rollout.vllm_common import weights_dtype as engine_dtype

    model = torch.nn.Linear(3, 2)
    model.register_buffer("steps", torch.tensor([1, 2]))
    actor = Actor(model, torch.optim.SGD(model.parameters(), lr=0.1), backend=None)  # type: ignore[arg-type]

    class Engine:
        weights_dtype = engine_dtype("bfloat16")

    state = refresh_state(actor, Engine())  # type: ignore[arg-type]
    assert state["weight"].dtype == torch.bfloat16 and state["steps"].dtype == torch.int64
    assert torch.equal(state["weight"], model.weight.detach().to(torch.bfloat16))
    assert refresh_state(actor, object())["weight"].dtype == torch.float32  # type: ignore[arg-type]
    assert engine_dtype("auto") is None


def test_sequence_parallel_groups_share_a_data_rank_and_a_wrong_size_names_those_that_work() -> None:
    from videorl.parallel import Parallel

    mesh = [Parallel(r, 8, 2) for r in range(8)]
    assert [(p.data_rank, p.sp_rank) for p in mesh[:4]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert {p.data_size for p in mesh} == {4}  # four shares of the prompts, each held by two ranks
    with pytest.raises(
        ConfigError, match=r"one process cannot shard sequences; train under torchrun .*--nproc-per-node 2"
    ):
        Parallel(0, 1, 2)  # one process is k = 1 only
    with pytest.raises(ConfigError, match=r"sizes that divide it: \[1, 2, 3, 6\]"):
        Parallel(0, 6, 4)


def test_sequence_parallel_size_is_validated_one_process_refuses_it_and_ray_needs_whole_groups(
    tmp_path: Path,
) -> None:
    from videorl.cluster.launch import train_on_ray
    from videorl.config import load_config
    from videorl.parallel import init_distributed
    from videorl.plugins import load_plugins

    base = ["model.path=/m", "data.train_files=[/d.jsonl]", f"output_dir={tmp_path / 'run'}"]
    with pytest.raises(ConfigError, match="sequence_parallel_size"):
        load_config(None, [*base, "actor.sequence_parallel_size=0"])
    config = load_config(None, [*base, "actor.sequence_parallel_size=2"])
    with pytest.raises(ConfigError, match="one process cannot shard sequences; train under torchrun"):
        init_distributed(config.actor.sequence_parallel_size)  # WORLD_SIZE unset: one process
    # one actor worker cannot form a group of two (tests/test_cluster_groups.py: the layout)
    with pytest.raises(ConfigError, match=r"ray.actor_workers=1 with actor.sequence_parallel_size=2: .*"):
        train_on_ray(config, load_plugins())
    assert not (tmp_path / "run").exists()  # refused before anything was written
    from videorl.parallel import Parallel
    from videorl.rollout.factory import make_rank_engine

    tensor_parallel = load_config(
        None, [*base, "actor.sequence_parallel_size=2", "rollout.engine_options={tensor_parallel_size: 2}"]
    )
    with pytest.raises(ConfigError, match="tensor_parallel_size=2 with actor.sequence_parallel_size=2"):
        make_rank_engine(tensor_parallel, load_plugins(), None, None, Parallel(0, 2, 2))  # type: ignore[arg-type]


def test_a_sequence_parallel_group_trains_on_its_leaders_rollout() -> None:
    """Only the group's first rank rolls out; every rank gets what the broadcast carries (the leader's
    groups), and without sequence parallelism the rollout is the rank's own."""
    from videorl.parallel import Parallel
    from videorl.rollout.collect import sequence_group_rollout

    calls: list[tuple[int, int]] = []

    def rollout(samples: list[Any], seed: int, first: int) -> tuple[list[list[Any]], dict[str, float]]:
        calls.append((seed, first))
        return [[f"episode of {s}" for s in samples]], {"seed": float(seed)}

    class Group(Parallel):  # the broadcast of a two-rank group whose leader sent `sent`
        sent: Any = None

        def from_sequence_leader(self, value: Any) -> Any:
            if self.is_sequence_leader:
                Group.sent = value
            return Group.sent

    leader, follower = Group(0, 2, 2), Group(1, 2, 2)
    want = ([["episode of a", "episode of b"]], {"seed": 7.0})
    assert sequence_group_rollout(rollout, leader)(["a", "b"], 7, 0) == want
    assert sequence_group_rollout(rollout, follower)(["a", "b"], 8, 0) == want  # the leader's, not its own
    assert calls == [(7, 0)]  # the follower generated nothing
    assert sequence_group_rollout(rollout, Parallel(1, 2, 1)) is rollout
