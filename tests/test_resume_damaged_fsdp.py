"""``--resume auto`` of a two-process FSDP run (torchrun, gloo on CPU) whose newest checkpoint is damaged in
rank 1's shard only, a file rank 0 never reads: the ranks agree on the previous checkpoint, and rank 0's
``metrics.jsonl`` and ``completions.jsonl`` are trimmed to that step, so every step is logged once.

The test starts this file under torchrun; each rank builds the run exactly as ``videorl train`` does
(:func:`videorl.train.compose.build_training`) and trains.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_a_damaged_shard_of_rank_1_resumes_both_ranks_and_logs_every_step_once(tmp_path: Path) -> None:
    from videorl import demo
    from videorl.plugins import load_plugins
    from videorl.runs.history import read_metrics

    task = tmp_path / "task"
    model, train, val = demo.prepare(task, load_plugins(), family="qwen2_5_vl", seed=0, train=2, val=1)
    run = tmp_path / "run"

    def overrides(steps: int, *extra: str) -> list[str]:
        return [*demo.demo_overrides(task, model, train, val, steps=steps, seed=5, engine="hf"),
                f"output_dir={run}", "data.val_files=[]", "data.rollout_batch_size=2",
                "actor.global_batch_size=2", "rollout.n=2", "trainer.save_every=1", "trainer.val_every=0",
                "trainer.progress_bar=false", "trainer.log_completions=1", *extra]  # fmt: skip

    done = _torchrun(overrides(2))
    assert done.returncode == 0, done.stderr[-4000:]
    logged = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in logged] == [1, 2]
    newest = run / "checkpoints" / "step_000002"
    assert json.loads((newest / "state.json").read_text())["writers"]["tensors/__1_0.distcp"] == 1
    shard = newest / "tensors" / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only rank 1, which reads this file, finds it damaged
    shard.write_bytes(bytes(data))

    done = _torchrun(overrides(3, "trainer.resume=auto"))
    assert done.returncode == 0, done.stderr[-4000:]
    assert "skipping checkpoint step_000002" in done.stderr and "does not match its checksum" in done.stderr
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]  # step 2 trained again after step 1, logged once
    assert rows[0] == logged[0]  # the rows before the agreed checkpoint are kept as they were
    completions = [json.loads(line) for line in (run / "completions.jsonl").read_text().splitlines()]
    assert [c["step"] for c in completions] == [1, 2, 3]
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == ["step_000002", "step_000003"]


def _torchrun(overrides: list[str]) -> subprocess.CompletedProcess[str]:
    """Run this file's :func:`_rank_main` on two CPU processes."""
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", __file__,
         *overrides],
        capture_output=True, text=True, timeout=420, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip


def _rank_main(overrides: list[str]) -> None:
    from videorl.config import load_config
    from videorl.parallel import init_distributed
    from videorl.plugins import load_plugins
    from videorl.train.compose import build_training

    dist = init_distributed()
    build_training(load_config(None, overrides), load_plugins(), dist=dist).run()


if __name__ == "__main__":
    _rank_main(sys.argv[1:])
