"""The GPU check: a few GRPO steps of the hf-engine path at a real model size, then FSDP2, packed
attention and vLLM phases (``scripts/gpu_phases.py``); one JSON line per phase.

``steps``: a Qwen2.5-VL with the real 3B shape (36 layers of width 2048, a 32-block vision tower of
width 1280, 151,936 vocabulary entries; random weights, built on the GPU, float32 masters with a
bfloat16 forward), the tokenizer of the tiny test model (its ids are all the model needs),
``--prompts`` video prompts of ``--frames`` random frames at ``--side``×``--side`` pixels (64 frames
at 448×448: 8,192 visual tokens), ``--n`` sampled responses of at most ``--response`` tokens each,
rewards drawn at random (the check is about the machinery, not learning), gradient checkpointing on.
Each step runs the loop's pieces: generate with the hf engine (the actor itself, under bf16
autocast), group-normalised advantages, ``grpo.update``; per step and stage (rollout, update) the
seconds, the tokens per second and the peak GPU memory (``torch.cuda.max_memory_allocated``).
``fsdp``, ``packed`` and ``vllm``: see ``scripts/gpu_phases.py``. Every line has ``phase``,
``seconds``, ``peak_gb`` and ``ok`` (true, false, or null with ``skip`` saying why); the first line
describes the machine and the model; the exit status is 1 when a phase failed.

``--shape tiny`` runs the same on the tiny model (on the CPU when there is no GPU): the check of the
script itself; ``--cpu-smoke`` is that with small sizes and the phases that run on a CPU (``steps``,
``fsdp`` on gloo, ``packed`` on sdpa). Needs torch and transformers (and vLLM for its phase);
videorl's own sources are found from this checkout.

Usage: ``python scripts/gpu_check.py [--shape 3b] [--phases steps,fsdp,packed,vllm] [--steps 2]
[--frames 64] [--side 448] [--prompts 2] [--n 4] [--response 128]`` (or ``scripts/gpu-check.sh``,
which sets up the environment).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "core" / "src"), str(ROOT / "plugins" / "models" / "src")]

PHASE_NAMES = ("steps", "fsdp", "packed", "vllm")

#: Qwen2.5-VL-3B-Instruct's shape (its config.json), weights random
SHAPE_3B: dict[str, Any] = {
    "text_config": {
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "num_hidden_layers": 36,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "max_position_embeddings": 128000,
        "layer_types": ["full_attention"] * 36,
        "max_window_layers": 70,
        "tie_word_embeddings": True,
        "rope_parameters": {"mrope_section": [16, 24, 24], "rope_theta": 1000000.0, "rope_type": "default"},
    },
    "vision_config": {
        "depth": 32,
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "out_hidden_size": 2048,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "window_size": 112,
    },
    "tie_word_embeddings": True,
}


def _peak_gb(torch: Any, cuda: bool) -> float | None:
    return round(torch.cuda.max_memory_allocated() / 1e9, 2) if cuda else None


def _reset(torch: Any, cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def built(cfg: Any) -> Any:
    """The run's algorithm, as the composition root builds it once (installed plugins)."""
    from videorl import algorithms
    from videorl.plugins import load_plugins

    return algorithms.build(cfg.algorithm, load_plugins())


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["3b", "tiny"], default="3b")
    parser.add_argument("--phases", default=",".join(PHASE_NAMES), help="comma-separated, in this order")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes and the phases a CPU runs")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--frames", type=int, default=64)
    parser.add_argument("--side", type=int, default=448)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--response", type=int, default=128)
    args = parser.parse_args()
    if args.cpu_smoke:
        args.shape, args.steps, args.frames, args.side, args.n, args.response = "tiny", 1, 4, 56, 2, 8
        if "--phases" not in sys.argv:
            args.phases = "steps,fsdp,packed"
    args.phases = [p for p in args.phases.split(",") if p]
    unknown = sorted(set(args.phases) - set(PHASE_NAMES))
    if unknown:
        parser.error(f"unknown phase(s) {unknown}; known: {', '.join(PHASE_NAMES)}")
    return args


def _model_dir(folder: Path, shape: str) -> Path:
    """The tiny model's folder; for the 3B shape its config.json says so (the weights are made random)."""
    from videorl_models.tiny import build_tiny

    model_dir = build_tiny("qwen2_5_vl", folder / "model", seed=0)
    if shape == "3b":
        config = json.loads((model_dir / "config.json").read_text())
        for key, values in SHAPE_3B.items():
            config[key] = {**config[key], **values} if isinstance(values, dict) else values
        (model_dir / "config.json").write_text(json.dumps(config))
    return model_dir


def _prompts(backend: Any, args: argparse.Namespace) -> list[Any]:
    """``--prompts`` video prompts of ``--frames`` random frames, encoded by the backend."""
    import torch

    from videorl.api import PromptInput
    from videorl.encoding import Prompt
    from videorl.media.metadata import VideoMetadata
    from videorl.media.sizing import fit_to_budget

    h, w = fit_to_budget(args.side, args.side, factor=backend.factor, min_pixels=3136, max_pixels=262144)
    g = torch.Generator().manual_seed(0)
    prompts = []
    for i in range(args.prompts):
        frames = torch.randint(0, 256, (args.frames, 3, h, w), dtype=torch.uint8, generator=g)
        meta = VideoMetadata(
            source_fps=30.0,
            total_frames=15 * args.frames,
            duration=args.frames / 2.0,
            frame_indices=tuple(15 * k for k in range(args.frames)),
            timestamps=tuple(k / 2.0 for k in range(args.frames)),
            source_width=w,
            source_height=h,
            width=w,
            height=h,
        )
        encoded = backend.encode(
            PromptInput(f"video-{i}", "What happens in the video?", videos=[(frames, meta)])
        )
        sample = SimpleNamespace(id=f"video-{i}", problem_type="free-form", origin="gpu_check")
        prompts.append(Prompt(sample, encoded, None))  # type: ignore[arg-type]
    return prompts


def steps_phase(ctx: Any, args: argparse.Namespace) -> dict[str, Any]:
    """``--steps`` GRPO steps of the hf-engine path (rollout, advantages, update) on one device."""
    import torch

    from videorl.actor.build import fused_adamw_options
    from videorl.actor.policy import Actor
    from videorl.actor.update import update
    from videorl.devices import use_fast_attention
    from videorl.episode import Episode
    from videorl.parallel import Parallel
    from videorl.rollout.hf import HFEngine
    from videorl.rollout.single_turn import sampling_params
    from videorl.timing import StageTimer
    from videorl.train.step import assign_advantages

    cuda, device, compute = ctx.cuda, ctx.device, ctx.compute
    start = time.perf_counter()
    model = ctx.new_model(device)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    use_fast_attention(model, compute)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, **fused_adamw_options(device))
    actor = Actor(model, optimizer, ctx.backend, compute_dtype=compute)
    out: dict[str, Any] = {
        "load": {
            "seconds": round(time.perf_counter() - start, 2),
            "peak_gb": _peak_gb(torch, cuda),
            "parameters": sum(p.numel() for p in model.parameters()),
        }
    }
    config = ctx.config(["actor.gradient_checkpointing=true"])
    engine = HFEngine(ctx.backend, model)
    rng = random.Random(0)
    steps = []
    for step in range(1, args.steps + 1):
        timer = StageTimer()
        row: dict[str, Any] = {"step": step}
        _reset(torch, cuda)
        with timer("rollout"), torch.autocast(device.type, dtype=compute, enabled=compute != torch.float32):
            groups = engine.generate(
                [p.require_encoded() for p in ctx.prompts], sampling_params(config, seed=step)
            )
        generated = sum(len(c.token_ids) for g in groups for c in g)
        row["rollout"] = {
            "seconds": round(timer.seconds["rollout"], 2),
            "generated_tokens": generated,
            "tokens_per_s": round(generated / timer.seconds["rollout"], 1),
            "peak_gb": _peak_gb(torch, cuda),
        }
        trajectories = [
            [Episode(p, i, c, reward=float(rng.random() < 0.5)) for c in group]
            for i, (p, group) in enumerate(zip(ctx.prompts, groups))
        ]
        flat = assign_advantages(config, built(config), trajectories)
        _reset(torch, cuda)
        update_start = time.perf_counter()
        metrics = update(config, actor, built(config), flat, Parallel(), timer)
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - update_start
        tokens = metrics["tokens/step"]
        row["update"] = {
            "seconds": round(seconds, 2),
            "tokens": int(tokens),
            "tokens_per_s": round(tokens / seconds, 1),
            "peak_gb": _peak_gb(torch, cuda),
            "loss": metrics["actor/loss"],
            "grad_norm": metrics["actor/grad_norm"],
        }
        if not all(math.isfinite(row["update"][k]) for k in ("loss", "grad_norm")):
            raise RuntimeError(f"step {step}: non-finite loss or gradient norm: {row['update']}")
        row["step_seconds"] = round(row["rollout"]["seconds"] + seconds, 2)
        steps.append(row)
    out["steps"] = steps
    return out


def main() -> None:
    args = _arguments()
    import torch

    from videorl.config import load_config
    from videorl.devices import attention_implementation, local_device
    from videorl_models.qwen2_5_vl import Qwen2_5VLBackend

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_phases import PHASES, Context, run_phase

    cuda = torch.cuda.is_available()
    compute = torch.bfloat16 if cuda else torch.float32
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = _model_dir(Path(tmp), args.shape)
        backend: Any = Qwen2_5VLBackend(
            model_dir
        )  # the family class, typed by the ModelBackend protocol at use
        prompts = _prompts(backend, args)

        def config(extra: list[str]) -> Any:
            return load_config(
                None,
                [
                    f"model.path={model_dir}",
                    "data.train_files=[unused.jsonl]",
                    f"rollout.n={args.n}",
                    f"rollout.max_response_length={args.response}",
                    f"data.rollout_batch_size={args.prompts}",
                    f"actor.global_batch_size={args.prompts}",
                    *extra,
                ],
            )

        ctx = Context(
            torch, local_device(), compute, backend, model_dir, prompts, config, args.response, args.n
        )
        print(json.dumps({
            "phase": "machine",
            "device": torch.cuda.get_device_name() if cuda else "cpu",
            "shape": args.shape,
            "torch": torch.__version__,
            "attention": attention_implementation(compute) or "sdpa",
            "prompt_tokens": [len(p.require_encoded()) for p in prompts],
        }), flush=True)  # fmt: skip
        bodies: dict[str, Callable[[Any], dict[str, Any]]] = {
            "steps": functools.partial(steps_phase, args=args),
            **PHASES,
        }
        for name in args.phases:
            row = run_phase(name, bodies[name], ctx)
            failed |= row["ok"] is False
            print(json.dumps(row), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
