"""Sharded checkpoints with two CPU processes (torchrun, gloo, FSDP2): each rank writes only its shards
and reads back only its shards, the write runs in the background while training goes on, the resume
is bit-identical, and the export of the sharded checkpoint (one process, no group) is the trained model.

The test starts this file under torchrun; each rank trains a small sharded model one step, saves
asynchronously, trains a second step while the save is written, then a fresh model resumes from the
checkpoint and trains the same second step. Each rank reports the bytes it wrote and read per file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

WIDTH = 128  # a model of 2 × 128 × 512 weights: 1.6 MB of parameters and Adam moments


@pytest.mark.slow
def test_each_rank_writes_and_reads_its_own_shards_and_resumes_bit_identically(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    from videorl.runs.checkpoint import CheckpointManager
    from videorl.runs.export import export_hf_model

    root = tmp_path / "run" / "checkpoints"
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         __file__, str(root), str(tmp_path)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    path = root / "step_000001"
    manifest = json.loads((path / "state.json").read_text())
    assert manifest["world_size"] == 2
    assert manifest["writers"] == {"tensors/__0_0.distcp": 0, "tensors/__1_0.distcp": 1}
    trained = load_file(str(tmp_path / "step1.safetensors"))  # the full model after step 1
    full_bytes = 3 * sum(
        t.numel() * t.element_size() for t in trained.values()
    )  # weights, exp_avg, exp_avg_sq
    for r, report in enumerate(ranks):
        assert report["pending_while_training"], "the save was complete before the next step ran"
        assert report["resumed_step"] == 1 and report["data"] == {"index": 10 + r}
        assert report["same_after_resume"] and report["same_optimizer_after_resume"]
        written = manifest["files"][f"tensors/__{r}_0.distcp"]
        assert 0.45 * full_bytes < written < 0.6 * full_bytes, (written, full_bytes)  # half of the state
        read = report["read"]  # file -> the lengths of the pieces read from it
        own = sum(read.pop(f"__{r}_0.distcp"))
        assert 0.45 * full_bytes < own <= written  # its shards...
        # ...and from the other rank's file only what DCP stored once for both: the optimizer's step
        # counters and parameter groups (a few hundred bytes each, any model size), no tensor shard
        assert all(length < 2048 for lengths in read.values() for length in lengths), read
    # export in one process, without a process group: the whole trained model
    ckpt = CheckpointManager(root).load(path)
    state = ckpt.model_state()
    assert state.keys() == trained.keys() and all(torch.equal(state[k], trained[k]) for k in trained)
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    out = export_hf_model(ckpt, base, tmp_path / "hf")
    exported = load_file(str(out / "model.safetensors"))
    assert exported.keys() == trained.keys() and all(torch.equal(exported[k], trained[k]) for k in trained)


def _model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.Tanh(), torch.nn.Linear(4 * WIDTH, WIDTH)
    )


def _sharded(seed: int) -> tuple[Any, Any]:
    import torch
    from torch.distributed.fsdp import fully_shard

    model = _model()
    with torch.no_grad():  # a fresh model: other weights than the one that is resumed
        for p in model.parameters():
            p.add_(seed)
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)


def _step(model: Any, optimizer: Any, rank: int, step: int) -> None:
    import torch

    generator = torch.Generator().manual_seed(100 * step + rank)  # each rank its own data
    x = torch.randn(4, WIDTH, generator=generator)
    model(x).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def _full(model: Any) -> dict[str, Any]:
    return {name: p.full_tensor().detach().clone() for name, p in model.named_parameters()}


def _optimizer_full(optimizer: Any) -> list[Any]:
    return [
        value.full_tensor() if hasattr(value, "full_tensor") else value
        for state in optimizer.state.values()
        for value in state.values()
    ]


class _Position:
    def __init__(self) -> None:
        self.state: dict[str, int] = {}

    def state_dict(self) -> dict[str, int]:
        return self.state

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.state = dict(state)


def _rank_main(root: Path, out: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter

    from videorl.parallel import init_distributed
    from videorl.runs.checkpoint import CheckpointManager
    from videorl.runs.resume import ActorState, resume, save_checkpoint

    dist = init_distributed()
    model, optimizer = _sharded(0)
    _step(model, optimizer, dist.rank, 1)
    step1 = _full(model)
    if dist.rank == 0:
        save_file({k: v.contiguous() for k, v in step1.items()}, str(out / "step1.safetensors"))
    manager = CheckpointManager(root)
    trained = threading.Event()
    write = FileSystemWriter.write_data

    def held(self: Any, *args: Any, **kwargs: Any) -> Any:  # the write waits until step 2 is trained
        assert trained.wait(60)
        return write(self, *args, **kwargs)

    with patch.object(FileSystemWriter, "write_data", held):
        state = ActorState(model, optimizer)
        save_checkpoint(1, state, manager, dist, data_state={"index": 10 + dist.rank})
        pending = manager.latest() is None  # staged in host memory; the write goes on in the background
        _step(model, optimizer, dist.rank, 2)  # FSDP's collectives while the save's are in flight
        expected, expected_optimizer = _full(model), _optimizer_full(optimizer)
        trained.set()
        manager.wait()

    read: dict[str, list[int]] = {}
    original = FileSystemReader.read_data

    def recording(self: Any, plan: Any, planner: Any) -> Any:
        for item in plan.items:
            info = self.storage_data[item.storage_index]
            read.setdefault(info.relative_path, []).append(info.length)
        return original(self, plan, planner)

    fresh, fresh_optimizer = _sharded(1)
    position = _Position()
    with patch.object(FileSystemReader, "read_data", recording):
        state = ActorState(fresh, fresh_optimizer)
        resumed = resume("auto", state, CheckpointManager(root), dist, data=position)
    _step(fresh, fresh_optimizer, dist.rank, 2)
    again, again_optimizer = _full(fresh), _optimizer_full(fresh_optimizer)
    report = {
        "pending_while_training": pending,
        "resumed_step": resumed,
        "data": position.state,
        "same_after_resume": all(torch.equal(again[k], expected[k]) for k in expected),
        "same_optimizer_after_resume": len(again_optimizer) == len(expected_optimizer)
        and all(torch.equal(a, b) for a, b in zip(again_optimizer, expected_optimizer)),
        "read": read,
    }
    (out / f"rank{dist.rank}.json").write_text(json.dumps(report))
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    _rank_main(Path(sys.argv[1]), Path(sys.argv[2]))
