"""Sequence parallelism on CPU: equality with one process, per-rank activation memory, longest video.

A tiny random Qwen2.5-VL (text width ``--width``: 4 attention heads at 128, so ``k = 4`` splits them;
2 layers; its vision tower of half the width) trains on one long packed sequence: a video prompt of
``--frames`` frames at ``--side``×``--side`` pixels (``(side/28)²`` visual tokens per temporal patch
of two frames) and a ``--response``-token response. For each ``k`` of ``--sizes`` ``k`` gloo ranks
(spawned processes, fp32, one torch thread) run the update's forward and backward
(``videorl.actor.update.forward_responses``, padding-free, gradient checkpointing unless
``--no-checkpointing``), ``k > 1`` with Ulysses and the vision tower sharded by temporal patches.

Figures (one JSON line):

- ``logprob_max_abs_diff``, ``grad_max_rel_diff``: the response log-probs and every parameter's
  gradient (summed over the group; relative to the parameter's largest ``k = 1`` entry) at each ``k``
  against ``k = 1``, worst over ``k``.
- ``activation_peak_ratio``: per ``k``, the largest over the ranks of the peak activation memory of
  the update divided by ``k = 1``'s, same sequence.
- ``max_frames_ratio``: the cap is ``k = 1``'s peak at ``--frames``; the longest video (frame counts
  in steps of two, one temporal patch) whose peak stays within it at ``k = max(sizes)``, found by
  doubling then bisection, divided by the longest at ``k = 1`` (searched the same way).

How the memory is measured, and why it is the GPU's: a ``TorchDispatchMode`` sees every tensor an
operator returns, forward and backward (recomputation included); it counts each new storage's bytes
once while the storage lives (a weak-reference finalizer subtracts them when it is freed) and keeps
the peak of that live sum. Counting starts when the model's forward starts, so the weights, the
pre-allocated gradients (accumulated in place) and the micro-batch's inputs (ids, pixel values:
data, whole on every rank) are excluded, and everything the forward and backward create is in: saved
activations, checkpoints, recomputed layers, all-to-all and all-gather buffers, gradients of
activations. A GPU's caching allocator's peak "allocated" bytes is the same maximum of live storage
bytes over time (rounded up to 512-byte blocks), so the ratio is what ``torch.cuda.max_memory_allocated``
would show for the same fp32 ops; resident memory (``ru_maxrss``) is not used because malloc arenas
and the neighbours on a shared machine blur it. Kernels that allocate outside PyTorch's allocator
(none on this CPU path; flash-attention's workspace on a GPU) are not seen.

Usage: ``python benchmarks/sequence_parallel.py [--sizes 1,2,4] [--frames 64] [--side 112]
[--response 16] [--width 128] [--no-checkpointing]`` (one JSON line; 2 minutes of CPU, up to 8 of wall
time on 2 shared cores: the ``k = 4`` search runs four processes).

Measured 2026-12-02 (defaults: 571 tokens, 512 of them visual, gradient checkpointing on): log-probs
equal (0.0), gradients within 2.0e-6 relative; peak 14.32 MB at ``k = 1``, 7.02 MB at 2 (0.49),
3.51 MB at 4 (0.245); the longest video under ``k = 1``'s peak: 64 frames at 1, 256 at 4 (4.0x).
``--no-checkpointing``: 35.4, 18.53, 9.96 MB (0.524, 0.281: the whole-row input embeddings and gathered
visual features, saved for the backward on every rank, are 11% of ``k = 4``'s peak); 64 and 232
frames (3.62x).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import traceback
import weakref
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary


class LivePeak(TorchDispatchMode):
    """The peak of the bytes of live tensor storages created by operators after :meth:`start`."""

    def __init__(self) -> None:
        super().__init__()
        self.counting = False
        self.live = 0
        self.peak = 0
        self._seen: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def start(self) -> None:
        self.counting, self.live, self.peak = True, 0, 0

    def _free(self, size: int) -> None:
        self.live -= size

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        # an operand not seen before existed before counting (weights, gradients, inputs): never counted,
        # nor are the views and in-place results an operator returns of it
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor) and t.untyped_storage() not in self._seen:
                self._seen[t.untyped_storage()] = 0
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.untyped_storage() not in self._seen:
                storage = t.untyped_storage()
                size = storage.nbytes() if self.counting else 0
                self._seen[storage] = size
                if size:
                    weakref.finalize(storage, self._free, size)
                    self.live += size
                    self.peak = max(self.peak, self.live)
        return out


def episode(backend: Any, frames: int, side: int, response: int) -> Any:
    """One video prompt of ``frames`` random frames and a fixed random response."""
    import torch

    from videorl.encoding import Prompt
    from videorl.episode import Episode
    from videorl.media import VideoMetadata
    from videorl.model_inputs import PromptInput
    from videorl.rollout import Completion

    g = torch.Generator().manual_seed(frames)
    pixels = torch.randint(0, 256, (frames, 3, side, side), dtype=torch.uint8, generator=g)
    meta = VideoMetadata.every_frame(frames, side, side, fps=2.0)
    encoded = backend.encode(PromptInput("long", "What happens in the video?", videos=[(pixels, meta)]))
    forbidden = backend.forbidden_token_ids()
    allowed = torch.tensor([i for i in range(len(backend.tokenizer)) if i not in forbidden])
    ids = allowed[torch.randint(0, len(allowed), (response,), generator=g)].tolist()
    return Episode(Prompt(None, encoded, None), 0, Completion(ids, [-1.0] * response, "stop"))  # type: ignore[arg-type]


def update(model: Any, backend: Any, item: Any, size: int, tracker: LivePeak) -> tuple[Any, int]:
    """The update's forward and backward on ``item``: the masked log-probs and this rank's peak."""
    import torch

    from videorl.actor.update import forward_responses

    for p in model.parameters():  # accumulated in place: the gradients are no activation
        p.grad = torch.zeros_like(p)
    with tracker:
        tracker.counting = False
        logp, _, mask = forward_responses(model, backend, [item], [], padding_free=True)
        ((logp * mask).sum() / size).backward()
        tracker.counting = False
    return (logp * mask).detach(), tracker.peak


def group_peak(peak: int, size: int) -> int:
    """The largest peak over the group's ranks."""
    import torch
    import torch.distributed as dist

    if size == 1:
        return peak
    value = torch.tensor([peak], dtype=torch.int64)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return int(value.item())


def longest(fits: Any, start: int, limit: int) -> int:
    """The most frames (a multiple of 2) for which ``fits(frames)``, given that ``start`` fits: doubling
    up to ``limit``, then bisection."""
    lo, hi = start, start
    while hi < limit:
        hi = min(limit, 2 * hi)
        if not fits(hi):
            break
        lo = hi
    else:
        return lo
    while hi - lo > 2:
        mid = (lo + hi) // 4 * 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def _rank(rank: int, size: int, args: dict[str, Any]) -> None:
    """One rank: the equality batch with its peak, then (``search``) the longest video under ``cap``."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    out = Path(args["out"])
    result: dict[str, Any] = {"ok": False}
    try:
        from safetensors.torch import save_file

        from videorl.actor import ulysses
        from videorl.api import backend_for_model
        from videorl.plugins import load_plugins

        dist.init_process_group(
            "gloo",
            init_method=f"file://{out / f'pg-{size}'}",
            rank=rank,
            world_size=size,
            timeout=timedelta(seconds=300),
        )
        backend = backend_for_model(args["model"], load_plugins().model_backends)
        model = backend.load_model().train()
        if args["checkpointing"]:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if size > 1:
            ulysses.install_sequence_parallel(model, backend, dist.group.WORLD, size, rank)
        tracker = LivePeak()
        model.register_forward_pre_hook(lambda module, inputs: tracker.start())

        def peak(frames: int) -> int:
            item = episode(backend, frames, args["side"], args["response"])
            return group_peak(update(model, backend, item, size, tracker)[1], size)

        item = episode(backend, args["frames"], args["side"], args["response"])
        logp, own = update(model, backend, item, size, tracker)
        result["peak"] = group_peak(own, size)
        result["tokens"] = len(item.prompt.require_encoded()) + args["response"]
        grads = {}
        for name, p in model.named_parameters():
            assert p.grad is not None
            if size > 1:
                dist.all_reduce(p.grad)
            grads[f"grad/{name}"] = p.grad.detach().clone()
        if rank == 0:
            save_file({"logp": logp, **grads}, str(out / f"k{size}.safetensors"))
        if args["search"]:
            cap = args["cap"] or result["peak"]
            result["max_frames"] = longest(lambda f: peak(f) <= cap, args["frames"], args["limit"])
        result["ok"] = True
        dist.barrier()
    except Exception as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
    finally:
        (out / f"k{size}-rank{rank}.json").write_text(json.dumps(result))
        if dist.is_initialized():
            dist.destroy_process_group()


def run_size(size: int, args: dict[str, Any]) -> dict[str, Any]:
    """``size`` gloo ranks on ``args``; rank 0's result (every rank must succeed)."""
    import torch.multiprocessing as mp

    mp.spawn(_rank, args=(size, args), nprocs=size, join=True)
    ranks = [json.loads((Path(args["out"]) / f"k{size}-rank{r}.json").read_text()) for r in range(size)]
    failed = [r for r in ranks if not r["ok"]]
    if failed:
        sys.exit(f"k={size} failed: {failed[0]['error']}\n{failed[0].get('trace', '')}")
    return dict(ranks[0])


def differences(out: Path, size: int) -> tuple[float, float]:
    """The largest log-prob difference and relative gradient difference of ``k = size`` against 1."""
    from safetensors.torch import load_file

    got, want = load_file(str(out / f"k{size}.safetensors")), load_file(str(out / "k1.safetensors"))
    logp = (got["logp"] - want["logp"]).abs().max().item()
    worst = 0.0
    for key in (k for k in want if k.startswith("grad/")):
        scale = want[key].abs().max().item()
        gap = (got[key] - want[key]).abs().max().item()
        worst = max(worst, gap / scale if scale else gap)
    return logp, worst


def build_model(out: Path, width: int) -> Path:
    """The tiny Qwen2.5-VL of ``width`` (``width / 32`` attention heads)."""
    from videorl_models.tiny import build_tiny

    return Path(build_tiny("qwen2_5_vl", out / "model", seed=0, width=width))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,2,4", help="sequence-parallel sizes (1 is always run)")
    parser.add_argument("--frames", type=int, default=64, help="frames of the measured video (even)")
    parser.add_argument("--side", type=int, default=112, help="frame side in pixels (a multiple of 28)")
    parser.add_argument("--response", type=int, default=16)
    parser.add_argument("--width", type=int, default=128, help="text width (width/32 heads)")
    parser.add_argument("--limit", type=int, default=0, help="most frames searched (0: 8 x --frames)")
    parser.add_argument("--no-checkpointing", dest="checkpointing", action="store_false")
    ns = parser.parse_args()
    if ns.frames % 2 or ns.frames < 2 or ns.side % 28:
        parser.error("--frames must be even and --side a multiple of 28")
    sizes = sorted({1, *(int(s) for s in ns.sizes.split(","))})
    top = sizes[-1]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        common = {
            "model": str(build_model(out, ns.width)),
            "out": str(out),
            "frames": ns.frames,
            "side": ns.side,
            "response": ns.response,
            "checkpointing": ns.checkpointing,
            "limit": ns.limit or 8 * ns.frames,
        }
        one = run_size(1, {**common, "search": True, "cap": None})
        results = {1: one}
        for k in sizes[1:]:
            results[k] = run_size(k, {**common, "search": k == top, "cap": one["peak"]})
        gaps = [differences(out, k) for k in sizes[1:]]
    report = {
        "sizes": sizes,
        "tokens": one["tokens"],
        "frames": ns.frames,
        "gradient_checkpointing": ns.checkpointing,
        "logprob_max_abs_diff": max((g[0] for g in gaps), default=0.0),
        "grad_max_rel_diff": max((g[1] for g in gaps), default=0.0),
        "activation_peak_mb": {k: round(r["peak"] / 2**20, 2) for k, r in results.items()},
        "activation_peak_ratio": {k: round(r["peak"] / one["peak"], 3) for k, r in results.items()},
        "max_frames": {1: one["max_frames"], top: results[top].get("max_frames")},
        "search_limit_frames": common["limit"],
        "max_frames_ratio": round(results[top].get("max_frames", 0) / one["max_frames"], 2),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
