"""FSDP2 training with two CPU processes (torchrun, gloo): one rank trains on video, the other on text only
(the KL penalty on, so the sharded reference model runs too).

The test starts this file under torchrun; each rank builds the run exactly as ``videorl train`` does
(:func:`videorl.train.compose.build_training`), trains two steps, then writes what it holds: its
shards of the actor's parameters, the unsharded copy its HF engine generates with, which data types
it encoded and how many dummy vision forwards it ran. The test checks that the shards of both ranks
put together, both engine copies and the step-2 checkpoint are one and the same set of parameters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def _mixed_dataset(train: Path, out: Path) -> Path:
    """Rows in file order video, text, video, text: with ``data.shuffle=false`` and two ranks, rank 0
    takes rows 0 and 2 (video), rank 1 rows 1 and 3 (text only)."""
    videos = [json.loads(line) for line in train.read_text().splitlines()[:2]]
    rows: list[dict[str, Any]] = []
    for i, video in enumerate(videos):
        text = {
            "id": f"text-{i}",
            "data_type": "text",
            "problem_type": "multiple choice",
            "problem": "Which letter comes first in the alphabet?",
            "options": ["A. a", "B. b", "C. c", "D. d"],
            "answer": "A",
            "offline_output": "<answer>A</answer>",
        }
        rows += [video, text]
    path = out / "video_text.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.slow
def test_two_ranks_one_text_only_train_two_steps_and_hold_equal_parameters(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    from videorl import demo
    from videorl.backend import backend_for_model
    from videorl.parallel import backend_devices, process_group_options
    from videorl.plugins import load_plugins
    from videorl.runs.history import read_metrics

    plugins = load_plugins()
    task = tmp_path / "task"
    model, train, val = demo.prepare(task, plugins, family="qwen2_5_vl", seed=0, train=2, val=1)
    data = _mixed_dataset(train, task)
    run, dumps = tmp_path / "run", tmp_path / "dumps"
    dumps.mkdir()
    overrides = [
        *demo.demo_overrides(task, model, train, val, steps=2, seed=5, engine="hf"),
        f"output_dir={run}",
        f"data.train_files=[{data}]",
        "data.val_files=[]",
        "data.shuffle=false",
        "data.rollout_batch_size=2",
        "actor.global_batch_size=2",
        "rollout.n=4",
        "trainer.save_every=1",
        "trainer.val_every=0",
        "trainer.progress_bar=false",
        "algorithm.use_kl_loss=true",
    ]
    done = _torchrun(dumps, overrides)
    assert done.returncode == 0, done.stderr[-4000:]

    ranks = [json.loads((dumps / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["data_types"] == ["video", "video"]
    assert ranks[1]["data_types"] == ["text", "text"]
    assert ranks[0]["dummy_calls"] == 0 and ranks[1]["dummy_calls"] > 0  # the text-only rank ran the dummy
    assert [r["step"] for r in ranks[0]["steps"]] == [1, 2] == [r["step"] for r in ranks[1]["steps"]]
    assert ranks[0]["steps"] == ranks[1]["steps"]  # metrics are averaged over the ranks
    # Every collective the loop and the checkpoint code issue through torch.distributed (the Ray
    # workers run the same functions) carried tensors of a device type the GPU process group has a
    # backend for: CPU tensors, which an NCCL-only group refuses. (FSDP's own collectives run on its
    # mesh's device, the GPU.)
    gpu_backend = backend_devices(process_group_options(cuda=True, local_rank=0)["backend"])
    for r in ranks:
        assert {"all_reduce", "all_gather_object", "barrier"} <= set(r["collectives"]), r["collectives"]
        assert set(r["collective_devices"]) <= gpu_backend, r["collective_devices"]

    checkpoint = _model_state(run / "checkpoints" / "step_000002")
    shards = [load_file(str(dumps / f"rank{r}-shards.safetensors")) for r in (0, 1)]
    assert shards[0].keys() == shards[1].keys() and set(shards[0]) <= set(checkpoint)
    for name, first in shards[0].items():
        assert torch.equal(torch.cat([first, shards[1][name]]), checkpoint[name]), name
    for r in (0, 1):
        engine = load_file(str(dumps / f"rank{r}-engine.safetensors"))
        assert engine.keys() == checkpoint.keys()
        assert all(torch.equal(engine[k], checkpoint[k]) for k in checkpoint), f"rank {r}'s engine copy"
    base = backend_for_model(model, plugins.model_backends).load_model()
    initial = base.state_dict()
    assert initial.keys() == checkpoint.keys()
    # rank 0 read the model, rank 1 built it on meta and received its shards and buffers
    for r in (0, 1):
        start = load_file(str(dumps / f"rank{r}-initial.safetensors"))
        assert start.keys() == initial.keys() | {f"buffer:{n}" for n, _ in base.named_buffers()}
        assert all(torch.equal(start[k], initial[k]) for k in initial), f"rank {r}'s initial weights"
        assert all(torch.equal(start[f"buffer:{n}"], b) for n, b in base.named_buffers()), (
            f"rank {r}'s buffers"
        )
    tower = [k for k in checkpoint if k.startswith("model.visual.")]
    assert tower and any(
        not torch.equal(checkpoint[k], initial[k]) for k in tower
    )  # trained by rank 0's video
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    # The reference is sharded like the actor (its forward is a collective the text-only rank joins
    # with its own dummy vision forward): zero KL while the policy is the reference, then positive.
    assert rows[0]["actor/kl"] == 0.0 and rows[1]["actor/kl"] > 0

    # Resumed from step 1 (model, optimizer, data position, RNG; the engine copies refreshed), step 2
    # comes out the same.
    done = _torchrun(dumps, [*overrides, f"trainer.resume={run / 'checkpoints' / 'step_000001'}"])
    assert done.returncode == 0, done.stderr[-4000:]
    again = _model_state(run / "checkpoints" / "step_000002")
    assert all(torch.equal(again[k], checkpoint[k]) for k in checkpoint)
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2]


def _torchrun(dumps: Path, overrides: list[str]) -> subprocess.CompletedProcess[str]:
    """Run this file's :func:`_rank_main` on two CPU processes."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            __file__,
            str(dumps),
            *overrides,
        ],
        capture_output=True,
        text=True,
        timeout=420,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _record_collectives() -> tuple[set[str], set[str]]:
    """Wrap torch.distributed's collectives to record their names and their tensors' device types
    (object collectives: the device their pickles travel on)."""
    import torch
    import torch.distributed as tdist
    import torch.distributed.distributed_c10d as c10d

    names: set[str] = set()
    devices: set[str] = set()

    def record(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            names.add(name)
            for value in [*args, *kwargs.values()]:
                for t in value if isinstance(value, (list, tuple)) else [value]:
                    if isinstance(t, torch.Tensor):
                        devices.add(t.device.type)
            if name.endswith("_object") or name == "barrier":
                devices.add(c10d._get_object_coll_device(kwargs.get("group")))
            return fn(*args, **kwargs)

        return wrapper

    for name in (
        "all_reduce",
        "broadcast",
        "all_gather",
        "all_gather_into_tensor",
        "reduce_scatter_tensor",
        "all_gather_object",
        "broadcast_object_list",
        "gather_object",
        "scatter_object_list",
        "barrier",
    ):
        wrapped = record(name, getattr(c10d, name))
        setattr(c10d, name, wrapped)
        setattr(tdist, name, wrapped)
    return names, devices


def _rank_main(dumps: Path, overrides: list[str]) -> None:
    """One rank: build the run as ``videorl train`` does, train, then dump what this rank holds."""
    from safetensors.torch import save_file

    from videorl.config import load_config
    from videorl.parallel import init_distributed
    from videorl.plugins import load_plugins
    from videorl.train.compose import build_training

    dist = init_distributed()
    collectives, devices = _record_collectives()
    training = build_training(load_config(None, overrides), load_plugins(), dist=dist)
    start = {k: v.contiguous() for k, v in training.actor.weights().items()}
    start.update({f"buffer:{n}": b.detach().clone() for n, b in training.actor.model.named_buffers()})
    save_file(start, str(dumps / f"rank{dist.rank}-initial.safetensors"))
    data_types: list[str] = []
    encode = training.encode

    class RecordingEncoder:  # the run's encoder, recording each sample's data type; closed with the run
        def __call__(self, sample: Any) -> Any:
            data_types.append(sample.data_type)
            return encode(sample)

        def close(self) -> None:
            encode.close()

    training.encode = RecordingEncoder()  # type: ignore[assignment]
    steps: list[dict[str, Any]] = []
    training.run(
        on_step=lambda step, metrics: steps.append({"step": step, "reward": metrics["reward/overall"]})
    )
    shards = {n: p.to_local().detach().contiguous() for n, p in training.actor.model.named_parameters()}
    save_file(shards, str(dumps / f"rank{dist.rank}-shards.safetensors"))
    engine_model = training.engine.model  # type: ignore[attr-defined]
    save_file(
        {k: v.contiguous() for k, v in engine_model.state_dict().items()},
        str(dumps / f"rank{dist.rank}-engine.safetensors"),
    )
    sync = training.vision_sync
    result = {
        "data_types": data_types,
        "dummy_calls": sync.dummy_calls if sync else -1,
        "steps": steps,
        "collectives": sorted(collectives),
        "collective_devices": sorted(devices),
    }
    (dumps / f"rank{dist.rank}.json").write_text(json.dumps(result))


def _model_state(checkpoint: Path) -> dict[str, Any]:
    """The whole model state dict of a (sharded) checkpoint directory, read in this process."""
    from videorl.runs.checkpoint import CheckpointManager

    return CheckpointManager(checkpoint.parent).load(checkpoint).model_state()


if __name__ == "__main__":
    _rank_main(Path(sys.argv[1]), sys.argv[2:])
