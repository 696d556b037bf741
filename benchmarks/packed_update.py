"""The actor update packed (``actor.padding_free=true``) against padded, on a batch whose lengths vary 4×.

A random Qwen2.5-VL (``--layers`` text layers of width ``--width``, a vision tower of width 32 that
runs alike in both),
``--rows`` video prompts whose frame counts rise evenly from a quarter of ``--max-frames`` to it at
224×224 (64 visual tokens per temporal patch), each with a ``--response``-token response: one
micro-batch, one optimizer step of ``update`` (the run's code path: vision sync, packing or
padding, chunked log-softmax, backward, step). Padded, every row is as long as the longest;
packed, the row is exactly the sum of the lengths.

``--block-mask`` adds a third variant: packed, but with transformers' own sdpa over the block-diagonal
``N × N`` mask instead of :mod:`videorl.packed_attention`'s sdpa per sequence.

Each variant runs in a fresh process (``--rounds`` times, alternating) with ``--threads`` torch
threads (1 by default: on a shared machine more threads spin and measure the neighbours): one
warm-up update, then ``--repeats`` timed ones (their median wall and CPU time), and the growth of its
peak resident memory (``ru_maxrss``) over its resident memory before the first update. The first
update of each variant starts from the same weights; their losses and weights must agree within
1e-5 (else it exits 1).

Usage: ``python benchmarks/packed_update.py [--rows 8] [--max-frames 18] [--width 256] [--layers 4]
[--block-mask]``: one JSON line (time ratios padded / packed, the peak memory of each). About 3
minutes on 2 shared cores (5 with ``--block-mask``).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIDE = 224


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def frame_counts(rows: int, max_frames: int) -> list[int]:
    """Even frame counts rising from 2 to ``max_frames``."""
    return [2 * round((2 + (max_frames - 2) * i / max(rows - 1, 1)) / 2) for i in range(rows)]


def build_model(out: Path, width: int, layers: int) -> Path:
    """A random Qwen2.5-VL with ``layers`` text layers of width ``width`` and a vision tower of width 32:
    the language model dominates the work, as in the real checkpoints (7B: 28 layers of 3,584 against
    32 of 1,280 over four patches per visual token)."""
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    from videorl_models.tiny import build_tiny

    build_tiny("qwen2_5_vl", out, seed=0, width=width)
    config = AutoConfig.from_pretrained(out)
    config.text_config.num_hidden_layers = layers
    config.text_config.layer_types = ["full_attention"] * layers
    config.vision_config.hidden_size, config.vision_config.intermediate_size = 32, 64
    torch.manual_seed(0)
    AutoModelForImageTextToText.from_config(config, dtype=torch.float32).save_pretrained(out)
    return out


def trajectories(backend: Any, rows: int, max_frames: int, response: int) -> list[Any]:
    import torch

    from videorl.backend import PromptInput
    from videorl.data import Sample
    from videorl.encoding import Prompt
    from videorl.episode import Episode
    from videorl.media.metadata import VideoMetadata
    from videorl.rollout import Completion

    gen = torch.Generator().manual_seed(0)
    forbidden = backend.forbidden_token_ids()
    allowed = torch.tensor([i for i in range(len(backend.tokenizer)) if i not in forbidden])
    out = []
    for row, frames in enumerate(frame_counts(rows, max_frames)):
        video = torch.randint(0, 256, (frames, 3, SIDE, SIDE), dtype=torch.uint8, generator=gen)
        meta = VideoMetadata.every_frame(frames, SIDE, SIDE)
        sid = f"row{row}"
        sample = Sample(
            id=sid, data_type="video", problem="q", problem_type="multiple choice", ground_truth="A"
        )
        encoded = backend.encode(PromptInput(sid, "What colour is the square?", videos=[(video, meta)]))
        ids = allowed[torch.randint(0, len(allowed), (response,), generator=gen)].tolist()
        logprobs = (-torch.rand(response, generator=gen)).tolist()
        advantage = 1.0 if row % 2 == 0 else -1.0
        out.append(
            Episode(
                Prompt(sample, encoded, None),
                row // 2,
                Completion(ids, logprobs, "stop"),
                advantage=advantage,
            )
        )
    return out


def run_variant(model_dir: str, variant: str, args: argparse.Namespace) -> dict[str, Any]:
    """The updates of one variant (``packed``, ``padded``, ``block_mask``) in this process: times, peak
    memory growth, the first update's results."""
    import torch

    from videorl.actor.policy import Actor
    from videorl.actor.update import update
    from videorl.backend import backend_for_model
    from videorl.config import load_config
    from videorl.packed_attention import PACKED_SDPA
    from videorl.parallel import Parallel
    from videorl.plugins import load_plugins
    from videorl.timing import StageTimer

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    backend = backend_for_model(model_dir, load_plugins().model_backends)
    model = backend.load_model(dtype=torch.float32)
    if variant == "block_mask":  # undo install_packed_sdpa: transformers' mask from the counters
        for module in model.model.language_model.modules():
            if getattr(getattr(module, "config", None), "_attn_implementation", None) == PACKED_SDPA:
                module.config._attn_implementation = "sdpa"
    backend.install_vision_sync(model)
    padding_free = variant != "padded"
    actor = Actor(model, torch.optim.AdamW(model.parameters(), lr=1e-3), backend)
    batch = trajectories(backend, args.rows, args.max_frames, args.response)
    config = load_config(
        None,
        [
            "model.path=/m",
            "data.train_files=[/d.jsonl]",
            "rollout.n=2",
            f"data.rollout_batch_size={args.rows // 2}",
            f"actor.global_batch_size={args.rows // 2}",
            f"rollout.max_response_length={args.response}",
            f"actor.padding_free={str(padding_free).lower()}",
        ],
    )
    before = _rss_mb()
    seconds, cpu, first = [], [], {}
    for i in range(1 + args.repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        metrics = update(config, actor, built(config), batch, Parallel(), StageTimer())
        seconds.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        if i == 0:
            weights = torch.cat([p.detach().flatten() for p in model.parameters()])
            first = {
                "loss": metrics["actor/loss"],
                "weights": weights[:: max(1, weights.numel() // 4096)].tolist(),
            }
    lengths = [len(t.prompt.require_encoded()) + len(t.completion.token_ids) for t in batch]
    return {
        "seconds": statistics.median(seconds[1:]),
        "cpu_seconds": statistics.median(cpu[1:]),
        "peak_growth_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before,
        "positions": sum(lengths) if padding_free else len(lengths) * max(lengths),
        "lengths": lengths,
        **first,
    }


def built(cfg: Any) -> Any:
    """The run's algorithm, as the composition root builds it once (installed plugins)."""
    from videorl import algorithms
    from videorl.plugins import load_plugins

    return algorithms.build(cfg.algorithm, load_plugins())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--max-frames", type=int, default=18)
    parser.add_argument("--response", type=int, default=64)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of each variant's process")
    parser.add_argument("--block-mask", action="store_true", help="also run packed over the N × N mask")
    parser.add_argument("--variant", choices=["packed", "padded", "block_mask"], help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args.model, args.variant, args)))
        return

    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(Path(tmp) / "model", args.width, args.layers)
        names = ["packed", "padded", *(["block_mask"] if args.block_mask else [])]
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for _ in range(args.rounds):
            for variant in runs:
                child = [sys.executable, __file__, "--variant", variant, "--model", str(model)]
                for key in ("rows", "max_frames", "response", "width", "repeats", "threads"):
                    child += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
                done = subprocess.run(child, capture_output=True, text=True, check=True)
                runs[variant].append(json.loads(done.stdout.strip().splitlines()[-1]))
    packed, padded = runs["packed"], runs["padded"]
    loss_gap = abs(packed[0]["loss"] - padded[0]["loss"])
    weight_gap = max(abs(a - b) for a, b in zip(packed[0]["weights"], padded[0]["weights"]))
    lengths = packed[0]["lengths"]
    seconds = {v: statistics.median(r["seconds"] for r in rs) for v, rs in runs.items()}
    cpu = {v: statistics.median(r["cpu_seconds"] for r in rs) for v, rs in runs.items()}
    memory = {v: statistics.median(r["peak_growth_mb"] for r in rs) for v, rs in runs.items()}
    report = {
        "rows": len(lengths),
        "length_min": min(lengths),
        "length_max": max(lengths),
        "length_ratio": round(max(lengths) / min(lengths), 2),
        "positions_padded": padded[0]["positions"],
        "positions_packed": packed[0]["positions"],
        "padded_s": round(seconds["padded"], 3),
        "packed_s": round(seconds["packed"], 3),
        "time_ratio_padded_over_packed": round(seconds["padded"] / seconds["packed"], 2),
        "padded_cpu_s": round(cpu["padded"], 3),
        "packed_cpu_s": round(cpu["packed"], 3),
        "cpu_ratio_padded_over_packed": round(cpu["padded"] / cpu["packed"], 2),
        "padded_peak_mb": round(memory["padded"], 1),
        "packed_peak_mb": round(memory["packed"], 1),
        "memory_ratio_padded_over_packed": round(memory["padded"] / memory["packed"], 2),
        "loss_gap": loss_gap,
        "weight_gap": weight_gap,
    }
    if args.block_mask:
        report["block_mask_s"] = round(seconds["block_mask"], 3)
        report["block_mask_peak_mb"] = round(memory["block_mask"], 1)
        report["time_ratio_block_mask_over_packed"] = round(seconds["block_mask"] / seconds["packed"], 2)
        report["cpu_ratio_block_mask_over_packed"] = round(cpu["block_mask"] / cpu["packed"], 2)
    print(json.dumps(report))
    if loss_gap > 1e-5 or weight_gap > 1e-5:
        sys.exit(f"packed and padded updates differ (loss by {loss_gap:.3g}, weights by {weight_gap:.3g})")


if __name__ == "__main__":
    main()
