"""Checkpoint save and resume: the sharded DCP checkpoint (synchronous, and asynchronous: the time the
training loop is blocked) against the format before it (the whole state dicts as one
``model.safetensors`` and a ``torch.save``'d ``optimizer.pt``, written synchronously), side by side.

One process (no process group), a model of ``--mb`` MB of float32 weights with AdamW moments (three
times that on disk), on the checkpoint folder ``--dir`` (default: a temporary folder). Printed per
variant: the seconds the caller waits for a save, the seconds until the checkpoint is complete, and
the seconds of a resume; then the ratios and one JSON line with every figure. Under FSDP each rank
writes and reads 1/world of this (``tests/test_checkpoint_sharded.py`` checks the bytes per rank).

Usage: ``python benchmarks/checkpoint.py [--mb 256] [--repeats 3] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import torch

from videorl.parallel import Parallel
from videorl.runs.checkpoint import CheckpointManager
from videorl.runs.resume import ActorState, resume, save_checkpoint


def _actor(mb: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    width = 1024
    layers = max(1, mb * 2**20 // (4 * width * width))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, width)).sum().backward()
    optimizer.step()
    return model, optimizer


def _old_checksum(path: Path) -> str:
    """The old manifest's CRC-32 of a whole file, read in 16 MiB blocks (as the checkpoint code does)."""
    crc = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            crc = zlib.crc32(block, crc)
    return f"crc32:{crc:08x}"


def _old_format(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """What a save was before sharding: whole state dicts, safetensors and torch.save, fsynced and
    checksummed (as its manifest recorded them)."""
    from safetensors.torch import save_file

    path.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path / "model.safetensors"))
    with open(path / "optimizer.pt", "wb") as f:
        torch.save(optimizer.state_dict(), f)
        f.flush()
        os.fsync(f.fileno())
    with open(path / "model.safetensors", "rb+") as f:
        os.fsync(f.fileno())
    for name in ("model.safetensors", "optimizer.pt"):
        _old_checksum(path / name)


def _old_resume(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Its resume: the checksums checked, then both files read whole and loaded."""
    from safetensors.torch import load_file

    for name in ("model.safetensors", "optimizer.pt"):
        _old_checksum(path / name)

    model.load_state_dict(load_file(str(path / "model.safetensors")))
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))


def measure(mb: int, repeats: int, root: Path) -> dict[str, Any]:
    model, optimizer = _actor(mb)
    fresh, fresh_optimizer = _actor(mb)
    state, dist = ActorState(model, optimizer), Parallel()
    times: dict[str, list[float]] = {
        k: [] for k in ("old_save", "sync_save", "async_blocked", "async_complete", "old_resume", "resume")
    }
    for r in range(repeats):
        start = time.perf_counter()
        _old_format(root / f"old-{r}", model, optimizer)
        times["old_save"].append(time.perf_counter() - start)
        start = time.perf_counter()
        _old_resume(root / f"old-{r}", fresh, fresh_optimizer)
        times["old_resume"].append(time.perf_counter() - start)

        manager = CheckpointManager(root / f"sync-{r}")
        start = time.perf_counter()
        save_checkpoint(1, state, manager, dist, data_state={}, wait=True)
        times["sync_save"].append(time.perf_counter() - start)

        manager = CheckpointManager(root / f"async-{r}")
        start = time.perf_counter()
        save_checkpoint(1, state, manager, dist, data_state={})
        times["async_blocked"].append(time.perf_counter() - start)
        manager.wait()
        times["async_complete"].append(time.perf_counter() - start)
        start = time.perf_counter()
        resume("auto", ActorState(fresh, fresh_optimizer), CheckpointManager(root / f"async-{r}"), dist)
        times["resume"].append(time.perf_counter() - start)
    median = {k: statistics.median(v) for k, v in times.items()}
    params = sum(p.numel() for p in model.parameters())
    return {"params": params, "state_mb": round(3 * params * 4 / 2**20, 1), **median}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256, help="float32 weights of the model, in MB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        m = measure(args.mb, args.repeats, Path(tmp))
    print(f"model + AdamW state: {m['state_mb']} MB ({m['params']:,} parameters), median of {args.repeats}")
    print(f"{'':28}{'before (one file each)':>24}{'DCP sync':>12}{'DCP async':>12}")
    print(
        f"{'save: caller waits (s)':28}{m['old_save']:>24.3f}{m['sync_save']:>12.3f}"
        f"{m['async_blocked']:>12.3f}"
    )
    print(
        f"{'save: complete after (s)':28}{m['old_save']:>24.3f}{m['sync_save']:>12.3f}"
        f"{m['async_complete']:>12.3f}"
    )
    print(f"{'resume (s)':28}{m['old_resume']:>24.3f}{m['resume']:>12.3f}{m['resume']:>12.3f}")
    ratios = {
        "blocked_before_vs_async": m["old_save"] / m["async_blocked"],
        "save_before_vs_sync": m["old_save"] / m["sync_save"],
        "resume_before_vs_dcp": m["old_resume"] / m["resume"],
    }
    print("ratios: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    print(json.dumps({**m, **{k: round(v, 3) for k, v in ratios.items()}}))


if __name__ == "__main__":
    main()
