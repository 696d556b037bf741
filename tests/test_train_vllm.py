"""``videorl train`` with the vLLM engine (CPU build): two steps, and the engine's log-probs after the
weight refresh agree with the actor's.

Runs ``videorl train`` in a subprocess: vLLM changes process-wide settings (threads, RNG) that must not
leak into pytest. In one process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) vLLM starts in seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")


@pytest.mark.slow
def test_vllm_engine_trains_and_its_logprobs_match_the_actor_after_the_refresh(tmp_path: Path) -> None:
    from videorl import demo
    from videorl.config import load_config
    from videorl.plugins import load_plugins
    from videorl.train.checkpoint import CheckpointManager
    from videorl.train.compose import build_training
    from videorl.train.metrics import read_metrics

    plugins = load_plugins()
    task = tmp_path / "task"
    model, train, val = demo.prepare(task, plugins, family="qwen2_5_vl", seed=0, train=4, val=2)
    run = tmp_path / "run"
    config = tmp_path / "train.yaml"
    config.write_text("rollout:\n  engine: vllm\nmodel:\n  dtype: float32\n")
    overrides = [
        o for o in demo.demo_overrides(task, model, train, val, steps=2, seed=3, engine="vllm")
        if not o.startswith(("rollout.engine=", "model.dtype="))
    ]
    overrides += [f"output_dir={run}", "data.rollout_batch_size=2", "actor.global_batch_size=2", "rollout.n=4",
                  "trainer.save_every=1", "trainer.val_every=2", "trainer.progress_bar=false",
                  "rollout.engine_options={max_model_len: 1024}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    shm = Path("/dev/shm")
    weight_dirs = set(shm.glob("videorl-weights-*"))
    done = subprocess.run([sys.executable, "-m", "videorl.cli", "train", str(config), *overrides],
                          capture_output=True, text=True, timeout=540, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert set(shm.glob("videorl-weights-*")) <= weight_dirs  # the refresh directory was removed

    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["rollout/logprob_diff"] < 1e-4  # vLLM fp32 and the actor before any update
    assert rows[1]["rollout/logprob_diff"] < 1e-4  # ... and after the refresh from the updated actor
    assert "val/accuracy/overall" in rows[1]  # greedy validation through vLLM

    # The update of step 1 moved the actor's log-probs far more than that: an engine left with the
    # initial weights would have shown it in step 2.
    hf = [f"output_dir={tmp_path / 'check'}", "rollout.engine=hf", "rollout.engine_options={}"]
    check = build_training(load_config(run / "config.yaml", hf), plugins)
    before = _offline_answer_logprobs(check)
    step1 = CheckpointManager(run / "checkpoints").load(run / "checkpoints" / "step_000001")
    check.actor.model.load_state_dict(step1.model_state())
    moved = (before - _offline_answer_logprobs(check)).abs().mean()
    assert moved > 100 * 1e-4, float(moved)


def _offline_answer_logprobs(training: Any) -> Any:
    """Per-token log-probs of the validation prompts' offline answers under the actor."""
    import torch

    from videorl.model_inputs import response_logprobs

    backend = training.actor.backend
    prompts = training.validation
    answers = [backend.processor.tokenizer.encode(p.sample.offline_output, add_special_tokens=False) for p in prompts]
    inputs = backend.collate([p.encoded for p in prompts], answers)
    with torch.no_grad():
        logits = training.actor.model(**inputs.model_kwargs()).logits
    return response_logprobs(logits, inputs, forbidden=backend.forbidden_token_ids())[inputs.response_mask.bool()]
