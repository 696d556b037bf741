"""``--resume auto`` after the newest checkpoint was damaged on disk without changing its size: the run
continues from the previous complete checkpoint, with a warning naming the damaged one."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from videorl import demo
from videorl.config import load_config
from videorl.plugins import load_plugins
from videorl.runs.history import read_metrics
from videorl.train.compose import build_training


@pytest.mark.slow
def test_resume_auto_falls_back_past_a_same_size_corrupt_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model, train, val = demo.prepare(tmp_path, load_plugins(), family="qwen2_5_vl", seed=0, train=4, val=1)
    run = tmp_path / "run"

    def overrides(steps: int, *extra: str) -> list[str]:
        return [*demo.demo_overrides(tmp_path, model, train, val, steps=steps, seed=3, engine="hf"),
                f"output_dir={run}", "data.rollout_batch_size=2", "actor.global_batch_size=2", "rollout.n=4",
                "trainer.progress_bar=false", "trainer.val_every=0", "trainer.save_every=1",
                *extra]  # fmt: skip

    build_training(load_config(None, overrides(2)), load_plugins()).run()
    damaged = run / "checkpoints" / "step_000002" / "tensors" / "__0_0.distcp"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte of the model or optimizer shard: same size
    damaged.write_bytes(bytes(data))

    with caplog.at_level(logging.WARNING, logger="videorl.checkpoint"):
        last = build_training(load_config(None, overrides(3, "trainer.resume=auto")), load_plugins()).run()
    assert last == 3
    assert "skipping checkpoint step_000002" in caplog.text and "does not match its checksum" in caplog.text
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2, 3]  # step 2 again, once
