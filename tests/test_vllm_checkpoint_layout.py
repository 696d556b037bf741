"""A vLLM engine refreshed from the actor of a family whose transformers layout is not its Hub
checkpoints' (Qwen3-VL-MoE's transposed experts, LLaVA-OneVision's tower names): after
``update_weights(refresh_state(...))``, in memory and through the model folder, the engine's log-probs
are the perturbed actor's.

Runs in a subprocess: vLLM changes process-wide settings (threads, RNG) that must not leak into pytest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("vllm")

ROOT = Path(__file__).resolve().parents[1]
LLAVA_SRC = ROOT / "contrib" / "videorl-models-llava-onevision" / "src"

# ``python -c _REFRESH MODEL_DIR OUT_JSON``: generates from a video and a text prompt after refreshing
# the engine, in memory and then through the model folder, each time from the actor with its weights
# perturbed anew; writes the largest log-prob difference from the fp32 forward of the actor refreshed
# from and of the unperturbed model.
_REFRESH = """
import json, sys

import torch

from videorl.backend import backend_for_model, read_model_type
from videorl.plugins import load_plugins
from videorl.rollout.vllm import VLLMEngine
from videorl.actor.policy import Actor, refresh_state
from vllm_probe import PARAMS, max_logprob_diff, probe_prompts

model_dir, out = sys.argv[1:3]
if read_model_type(model_dir) == "llava_onevision":
    from videorl_models_llava_onevision.backend import LlavaOnevisionBackend

    backend = LlavaOnevisionBackend(model_dir)
else:
    backend = backend_for_model(model_dir, load_plugins().model_backends)
gen = torch.Generator().manual_seed(0)
prompts = probe_prompts(backend, gen)
base = backend.load_model(dtype=torch.float32)
model = backend.load_model(dtype=torch.float32)
actor = Actor(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.0), backend=backend)
engine = VLLMEngine(backend, model_dir, dtype="float32", max_model_len=1024,
                    distributed_executor_backend="uni")
result = {}
try:
    for sync in ("memory", "folder"):
        with torch.no_grad():  # every weight moves, the experts and the vision tower included
            for p in model.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
        engine.weight_sync = sync
        engine.update_weights(refresh_state(actor, engine))
        groups = engine.generate(prompts, PARAMS)
        result[sync] = {
            "vs_actor": max_logprob_diff(backend, prompts, groups, model)[0],
            "vs_base": max_logprob_diff(backend, prompts, groups, base)[0],
        }
finally:
    engine.close()
open(out, "w").write(json.dumps(result))
"""


def _llava(tmp_path: Path) -> Path:
    sys.path.insert(0, str(LLAVA_SRC))
    try:
        from videorl_models_llava_onevision.tiny import build_tiny
    finally:
        sys.path.remove(str(LLAVA_SRC))
    return build_tiny(tmp_path / "llava", seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen3_vl_moe", "llava_onevision"])
def test_the_refreshed_vllm_engine_gives_the_actor_s_logprobs(
    family: str, tmp_path: Path, tiny_model_dir: Callable[[str], Path], vllm_env: dict[str, str]
) -> None:
    import torch

    if family == "qwen3_vl_moe" and not torch.cuda.is_available():
        # vLLM 0.32's CPU experts pad the intermediate size and prepack at the first load only
        # (experts/cpu_moe.py process_weights_after_loading, skipped by _setup_kernel on an update):
        # any refresh of a CPU MoE engine fails there, whatever the layout.
        pytest.skip("vLLM's CPU MoE experts cannot be refreshed; runs on a CUDA host")
    model = _llava(tmp_path) if family == "llava_onevision" else tiny_model_dir(family)
    out = tmp_path / "result.json"
    env = {**os.environ, **vllm_env, "PYTHONPATH": os.pathsep.join([str(LLAVA_SRC), vllm_env["PYTHONPATH"]])}
    done = subprocess.run(
        [sys.executable, "-c", _REFRESH, str(model), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(out.read_text())
    for sync in ("memory", "folder"):
        assert result[sync]["vs_actor"] < 1e-4, result  # the engine holds the perturbed weights
        assert result[sync]["vs_base"] > 1e-2, result  # ... which differ from the checkpoint's
