"""vLLM (CPU) vs the teacher-forced HF forward: prompt ids and per-token log-probs of sampled responses.

Run by ``test_vllm.py`` in a subprocess (vLLM changes process-wide settings) as
``python vllm_logprobs.py MODEL_DIR FAMILY DTYPE OUT_JSON [MODEL_DIR FAMILY DTYPE OUT_JSON ...]``.
Writes to each OUT_JSON ``{"prompt_ids_equal": [...], "max_abs_diff": float, "tokens": int,
"forbidden_emitted": int}``, or ``{"error": traceback}``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(model_dir: str, family: str, dtype: str, out_json: str) -> None:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from vllm import LLM, SamplingParams

    from videorl.api import PromptInput, backend_for_model, check_same_prompt, response_logprobs
    from videorl.media import VideoMetadata
    from videorl.plugins import load_plugins

    backend = backend_for_model(model_dir, load_plugins().model_backends)
    assert backend.family == family, (backend.family, family)
    f = backend.factor
    gen = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (4, 3, 2 * f, 2 * f), dtype=torch.uint8, generator=gen)
    meta = VideoMetadata(
        source_fps=4.0,
        total_frames=16,
        duration=4.0,
        frame_indices=(0, 5, 10, 15),
        timestamps=(0.0, 1.25, 2.5, 3.75),
        source_width=2 * f,
        source_height=2 * f,
        width=2 * f,
        height=2 * f,
    )
    image = torch.randint(0, 256, (3, f, 2 * f), dtype=torch.uint8, generator=gen)
    prompts = [
        PromptInput("video", "What colour is the square?", videos=[(frames, meta)]),
        PromptInput("text", "Which direction does the object move?"),
        PromptInput("image", "What colour is the square?", images=[image]),
    ]
    encoded = [backend.encode(p) for p in prompts]
    requests = [backend.rollout_request(e) for e in encoded]
    forbidden = backend.forbidden_token_ids()
    vocab = len(backend.tokenizer)
    llm = LLM(
        model=model_dir,
        dtype=dtype,
        enforce_eager=True,
        max_model_len=1024,
        seed=0,
        distributed_executor_backend="uni",
        limit_mm_per_prompt={"image": 1, "video": 1},
    )
    params = SamplingParams(
        n=2,
        temperature=1.0,
        max_tokens=8,
        logprobs=0,
        seed=0,
        allowed_token_ids=[i for i in range(vocab) if i not in forbidden],
    )
    outputs = llm.generate([r.vllm_prompt() for r in requests], params)
    same, diffs, tokens, emitted = [], [], 0, 0
    model = backend.load_model(dtype=torch.float32)
    for enc, req, out in zip(encoded, requests, outputs):
        try:
            check_same_prompt(req.sample_id, req.prompt_ids, out.prompt_token_ids, where="vLLM")
            same.append(True)
        except Exception as exc:
            same.append(str(exc))
        responses = [list(c.token_ids) for c in out.outputs]
        emitted += sum(t in forbidden for r in responses for t in r)
        engine_lp = [[lp[t].logprob for lp, t in zip(c.logprobs, c.token_ids)] for c in out.outputs]
        inputs = backend.collate([enc] * len(responses), responses)
        with torch.no_grad():
            logits = model(**inputs.model_kwargs()).logits
        ours = response_logprobs(logits, inputs)
        for row, lps in enumerate(engine_lp):
            for j, value in enumerate(lps):
                diffs.append(abs(float(ours[row, j]) - value))
                tokens += 1
    Path(out_json).write_text(
        json.dumps(
            {
                "prompt_ids_equal": same,
                "max_abs_diff": max(diffs),
                "tokens": tokens,
                "forbidden_emitted": emitted,
            }
        )
    )


if __name__ == "__main__":
    # MODEL_DIR FAMILY DTYPE OUT_JSON, repeated: one process pays vLLM's import and start-up once
    import gc
    import traceback

    cases = sys.argv[1:]
    for i in range(0, len(cases), 4):
        try:
            main(*cases[i : i + 4])
        except Exception:  # this case fails, the next ones still run
            Path(cases[i + 3]).write_text(json.dumps({"error": traceback.format_exc()}))
        gc.collect()
