"""A two-rank FSDP2 training step on gloo: rank 0 holds a video sample, rank 1 a text-only one.

Run by ``test_fsdp.py`` as ``python fsdp_step.py MODEL_DIR OUT_DIR [--no-dummy]``. Each rank writes
``rank{N}.json`` (``{"ok": bool, "error": str}``); rank 0 also writes the updated full parameters to
``params.safetensors`` and, for the test to compare with, ``reference.safetensors``: the same step
without FSDP on the mean of both samples' gradients (:func:`reference_step`).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

LR = 1e-3


def samples(backend: Any) -> list[Any]:
    """Rank 0's video prompt and rank 1's text-only prompt, with fixed responses."""
    import torch

    from videorl.api import PromptInput
    from videorl.media import VideoMetadata

    f = backend.factor
    gen = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (2, 3, f, 2 * f), dtype=torch.uint8, generator=gen)
    meta = VideoMetadata.every_frame(2, f, 2 * f, fps=2.0)
    video = PromptInput("video-0", "What colour is the square?", videos=[(frames, meta)])
    text = PromptInput("text-0", "Which direction does the object move?")
    answer = backend.tokenizer("<answer>A</answer><|im_end|>", add_special_tokens=False)["input_ids"]
    return [(backend.encode(video), answer), (backend.encode(text), answer)]


def loss_of(backend: Any, model: Any, encoded: Any, response: list[int]) -> Any:
    from videorl.api import response_logprobs

    inputs = backend.collate([encoded], [response])
    logits = model(**inputs.model_kwargs()).logits
    logp = response_logprobs(logits, inputs)
    mask = inputs.response_mask.float()
    return -(logp * mask).sum() / mask.sum()


def reference_step(backend_cls: Any, model_dir: str) -> dict[str, Any]:
    """The same step in one process: the mean of the two samples' gradients, one AdamW step."""
    import torch

    backend = backend_cls(model_dir)
    model = backend.load_model().train()
    loss = sum(loss_of(backend, model, enc, resp) for enc, resp in samples(backend)) / 2
    loss.backward()
    torch.optim.AdamW(model.parameters(), lr=LR).step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _rank(rank: int, world: int, init_file: str, model_dir: str, out_dir: str, dummy: bool) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    out = Path(out_dir)
    result: dict[str, Any] = {"ok": False, "error": ""}
    try:
        from safetensors.torch import save_file
        from torch.distributed.fsdp import fully_shard

        from videorl_models.qwen2_5_vl import Qwen2_5VLBackend

        dist.init_process_group(
            "gloo",
            init_method=f"file://{init_file}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=30),
        )
        backend = Qwen2_5VLBackend(model_dir)
        model = backend.load_model().train()
        sync = backend.install_vision_sync(model)
        sync.dummy = dummy
        for block in model.model.visual.blocks:
            fully_shard(block)
        fully_shard(model.model.visual)
        for layer in model.model.language_model.layers:
            fully_shard(layer)
        fully_shard(model)
        encoded, response = samples(backend)[rank]
        loss_of(backend, model, encoded, response).backward()
        torch.optim.AdamW(model.parameters(), lr=LR).step()
        full = {n: p.full_tensor().detach().contiguous() for n, p in model.named_parameters()}
        if rank == 0:
            save_file(full, str(out / "params.safetensors"))
            save_file(reference_step(Qwen2_5VLBackend, model_dir), str(out / "reference.safetensors"))
        result = {"ok": True, "error": "", "dummy_calls": sync.dummy_calls}
        dist.barrier()
    except Exception as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
    finally:
        (out / f"rank{rank}.json").write_text(json.dumps(result))
        if dist.is_initialized():
            dist.destroy_process_group()


def main(argv: list[str]) -> None:
    import torch.multiprocessing as mp

    model_dir, out_dir = argv[0], argv[1]
    dummy = "--no-dummy" not in argv
    init_file = str(Path(out_dir) / "pg-init")
    mp.spawn(_rank, args=(2, init_file, model_dir, out_dir, dummy), nprocs=2, join=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(sys.argv[1:])
