"""vLLM (CPU build) as the rollout engine: it reproduces the framework's prompt ids, never samples a
forbidden id, and its per-token log-probs agree with the teacher-forced HF forward.

Runs in a subprocess: vLLM changes process-wide settings (threads, RNG) that must not leak into pytest.
Every family runs in the same one (vLLM's import and first start-up are paid once), each case writing
its own result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm")
SCRIPT = Path(__file__).with_name("vllm_logprobs.py")

CASES = [
    ("qwen2_5_vl", "float32", 1e-5),
    ("qwen2_vl", "float32", 1e-5),
    ("qwen3_vl", "float32", 1e-5),  # the un-nested timestamped prompt, expanded by vLLM
    ("qwen3_5", "bfloat16", 2e-2),  # vLLM's CPU gated-delta kernel runs in bf16 only
]


@pytest.fixture(scope="module")
def results(tiny_dir: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each case's result (or its error), from one subprocess."""
    out = tmp_path_factory.mktemp("vllm-logprobs")
    args = [
        arg
        for model_type, dtype, _ in CASES
        for arg in (str(tiny_dir(model_type)), model_type, dtype, str(out / f"{model_type}.json"))
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=900, env=env
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return {m: json.loads((out / f"{m}.json").read_text()) for m, _, _ in CASES}


@pytest.mark.slow
@pytest.mark.parametrize(("model_type", "dtype", "tolerance"), CASES)
def test_vllm_logprobs_agree_with_the_training_forward(
    model_type: str, dtype: str, tolerance: float, results: dict[str, Any]
) -> None:
    result = results[model_type]
    assert "error" not in result, result.get("error")
    assert result["prompt_ids_equal"] == [True, True, True]  # video, text and image prompts
    assert result["forbidden_emitted"] == 0
    assert result["tokens"] == 3 * 2 * 8
    assert result["max_abs_diff"] < tolerance, result
