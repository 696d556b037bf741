"""Peak host memory of one actor micro-batch (forward + backward) on a long-prompt batch: the update's
log-prob computation before (full-vocabulary logits of every position, whole-tensor float32
log-softmax and entropy, the entropy's graph kept) and now (``grpo.forward_responses``: the response's logits
only, chunked log-softmax recomputed in the backward, the entropy without a graph at coefficient 0).

A tiny random Qwen2.5-VL (text width 64) with its vocabulary padded to Qwen's 151,936 entries (the
logits then weigh what they weigh in the real model; the padded ids are masked as in training), one
video prompt of ``--frames`` frames at 336×336 (144 visual tokens per temporal patch) and ``--rows``
sampled responses of ``--response`` tokens. Each variant runs in a fresh process; the figure is the
growth of its peak resident memory (``ru_maxrss``) over its resident memory before the micro-batch.
Both variants must give the same loss (and log-probs within 1e-6).

Usage: ``python benchmarks/update_memory.py [--frames 20] [--rows 2] [--response 128]`` (prints one
JSON line; about 1 minute on 2 shared cores, up to ~5 GB of host memory for the "before" variant).

Measured 2026-12-01 (defaults: 1,481 prompt tokens, 2 rows of 128/127 response tokens): peak growth
4,622 MB before, 1,045 MB after (4.4x less); identical loss and log-probs (largest gap 0.0).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

VOCAB = 151_936


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def build_model(out: Path) -> Path:
    """A tiny Qwen2.5-VL whose embedding and LM head have Qwen's padded vocabulary size."""
    from transformers import AutoProcessor

    from videorl.backend import backend_for_model
    from videorl.plugins import load_plugins
    from videorl_models.tiny import build_tiny

    small = build_tiny("qwen2_5_vl", out / "small", seed=0)
    backend = backend_for_model(small, load_plugins().model_backends)
    model = backend.load_model()
    model.resize_token_embeddings(VOCAB)
    model.save_pretrained(out / "model")
    AutoProcessor.from_pretrained(small).save_pretrained(out / "model")
    return out / "model"


def run_variant(model_dir: str, variant: str, frames: int, rows: int, response: int) -> dict[str, Any]:
    """One micro-batch's forward and backward; the peak memory growth and the results."""
    import torch

    from videorl.actor.update import forward_responses
    from videorl.backend import PromptInput, backend_for_model
    from videorl.encoding import Prompt
    from videorl.episode import Episode
    from videorl.media.metadata import VideoMetadata
    from videorl.model_inputs import entropy_from_logits, mask_logits, response_logprobs
    from videorl.plugins import load_plugins
    from videorl.rollout import Completion

    torch.manual_seed(0)
    backend = backend_for_model(model_dir, load_plugins().model_backends)
    model = backend.load_model(dtype=torch.float32).train()
    side = 336
    video = torch.randint(0, 256, (frames, 3, side, side), dtype=torch.uint8)
    meta = VideoMetadata.every_frame(frames, side, side)
    encoded = backend.encode(PromptInput("long", "Describe the video.", videos=[(video, meta)]))
    forbidden = sorted(backend.forbidden_token_ids())
    allowed = [i for i in range(len(backend.tokenizer)) if i not in set(forbidden)]
    g = torch.Generator().manual_seed(1)
    batch = []
    for r in range(rows):
        ids = [allowed[int(i)] for i in torch.randint(0, len(allowed), (response - r,), generator=g)]
        batch.append(Episode(Prompt(None, encoded, None), 0, Completion(ids, [0.0] * len(ids), "length")))  # type: ignore[arg-type]

    before = _rss_mb()
    if variant == "before":  # the update's computation before: full logits, float32 copies, entropy graph
        inputs = backend.collate([encoded] * rows, [t.completion.token_ids for t in batch])
        logits = model(**inputs.model_kwargs()).logits
        logp = response_logprobs(logits, inputs, forbidden=forbidden)
        width, rwidth = inputs.prompt_width, logp.shape[1]
        entropy = entropy_from_logits(
            mask_logits(logits[:, width - 1 : width + rwidth - 1].float(), forbidden)
        )
        assert inputs.response_mask is not None
        mask = inputs.response_mask.float()
    else:
        logp, entropy, mask = forward_responses(model, backend, batch, forbidden)
        mask = mask.float()
    loss = -(logp * mask).sum() / mask.sum()
    loss.backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "variant": variant,
        "peak_growth_mb": round(peak - before, 1),
        "prompt_tokens": len(encoded),
        "loss": float(loss),
        "entropy": float((entropy.detach() * mask).sum() / mask.sum()),
        "logp": logp.detach()[mask.bool()].tolist(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--response", type=int, default=128)
    parser.add_argument("--variant", choices=["before", "after"], help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args.model, args.variant, args.frames, args.rows, args.response)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(Path(tmp))
        results = {}
        for variant in ("before", "after"):
            done = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--variant",
                    variant,
                    "--model",
                    str(model),
                    "--frames",
                    str(args.frames),
                    "--rows",
                    str(args.rows),
                    "--response",
                    str(args.response),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            results[variant] = json.loads(done.stdout.strip().splitlines()[-1])
    b, a = results["before"], results["after"]
    gap = max(abs(x - y) for x, y in zip(b["logp"], a["logp"]))
    print(
        json.dumps(
            {
                "prompt_tokens": b["prompt_tokens"],
                "rows": args.rows,
                "response_tokens": args.response,
                "vocab": VOCAB,
                "peak_growth_mb": {"before": b["peak_growth_mb"], "after": a["peak_growth_mb"]},
                "ratio": round(b["peak_growth_mb"] / max(a["peak_growth_mb"], 1e-9), 2),
                "loss": {"before": b["loss"], "after": a["loss"]},
                "max_logprob_gap": gap,
                "entropy": {"before": b["entropy"], "after": a["entropy"]},
            }
        )
    )


if __name__ == "__main__":
    main()
