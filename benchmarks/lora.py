"""LoRA against full fine-tuning: trainable parameters, optimizer state, reference copy and checkpoint size.

Prints one JSON line with two parts:

- ``demo``: measured on the demo task's tiny Qwen2.5-VL (``videorl demo`` vs ``videorl demo --lora``,
  both with the KL penalty on): each run is built with ``build_training`` exactly as ``videorl train``
  builds it and trains one step (hf engine), then the script counts what the actor holds — its
  parameters, the trainable ones, the reference model's tensors (full fine-tuning loads a frozen copy;
  LoRA's reference is the actor with its adapters off), the optimizer's state tensors — and the bytes
  of the step's checkpoint on disk.
- ``8b``: the same quantities by arithmetic for Qwen3-VL-8B, whose architecture is built on the meta
  device (no weight is allocated) with rank-16 adapters on the default targets (attention and MLP
  projections of the 36 decoder layers, vision tower frozen): full fine-tuning keeps float32 master
  weights and AdamW's two float32 moments (12 bytes per parameter in a checkpoint) and a bf16
  reference copy; LoRA keeps the bf16 base (no masters, no copy) and 12 bytes per adapter parameter.

``ratio`` entries are LoRA / full. Usage: ``python benchmarks/lora.py [--workdir DIR]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

GB = 1e9


def _tensor_bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure_demo(workdir: Path) -> dict[str, Any]:
    """Build and train one step of the demo with and without LoRA; what each actor holds."""
    import torch

    from videorl import demo
    from videorl.config import load_config
    from videorl.plugins import load_plugins
    from videorl.train.compose import build_training

    plugins = load_plugins()
    model, train, val = demo.prepare(workdir / "task", plugins, family="qwen2_5_vl", seed=0, train=8, val=2)
    out: dict[str, Any] = {}
    for name, extra in (("full", ()), ("lora", demo.LORA_OVERRIDES)):
        run = workdir / name
        overrides = [
            *demo.demo_overrides(workdir / "task", model, train, val, steps=1, seed=0, engine="hf"),
            f"output_dir={run}",
            "data.rollout_batch_size=4",
            "actor.global_batch_size=4",
            "trainer.val_every=0",
            "trainer.progress_bar=false",
            "algorithm.use_kl_loss=true",
            *extra,
        ]
        training = build_training(load_config(None, overrides), plugins)
        training.run()
        actor = training.actor
        params = list(actor.model.parameters())
        trainable = [p for group in actor.optimizer.param_groups for p in group["params"]]
        states = [v for s in actor.optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
        reference = [] if actor.reference is None else list(actor.reference.parameters())
        out[name] = {
            "parameters": sum(p.numel() for p in params),
            "trainable": sum(p.numel() for p in trainable),
            "model_bytes": _tensor_bytes(params),
            "reference_bytes": _tensor_bytes(reference),
            "optimizer_state_bytes": _tensor_bytes(states),
            "checkpoint_bytes": _folder_bytes(run / "checkpoints" / "step_000001"),
        }
    return out


def qwen3_vl_8b() -> Any:
    """Qwen3-VL-8B's architecture on the meta device (the published config's sizes)."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    config = Qwen3VLConfig(
        text_config={
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "num_hidden_layers": 36,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 151936,
        },
        vision_config={"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "out_hidden_size": 4096},
        tie_word_embeddings=False,
    )
    with torch.device("meta"):
        return Qwen3VLForConditionalGeneration(config)


def arithmetic_8b() -> dict[str, Any]:
    from videorl.actor.lora import inject
    from videorl.config.schema import LoraConfig

    model = qwen3_vl_8b()
    total = sum(p.numel() for p in model.parameters())
    adapters = inject(model, LoraConfig(enabled=True))  # rank 16, the default targets, tower frozen
    trainable = sum(p.numel() for p in adapters.parameters())
    base = total  # the adapters are extra parameters on top of the base's
    return {
        "full": {
            "parameters": base,
            "trainable": base,
            "model_bytes": 4 * base,  # float32 masters
            "reference_bytes": 2 * base,  # a bf16 copy
            "optimizer_state_bytes": 8 * base,  # AdamW's two float32 moments
            "checkpoint_bytes": 12 * base,
        },
        "lora": {
            "parameters": base + trainable,
            "trainable": trainable,
            "model_bytes": 2 * base + 4 * trainable,  # bf16 base, float32 adapters
            "reference_bytes": 0,
            "optimizer_state_bytes": 8 * trainable,
            "checkpoint_bytes": 12 * trainable,
        },
    }


def summary(part: dict[str, Any]) -> dict[str, Any]:
    full, lora = part["full"], part["lora"]
    return {
        **part,
        "trainable_fraction": {"full": 1.0, "lora": lora["trainable"] / lora["parameters"]},
        "reference_saved_gb": (full["reference_bytes"] - lora["reference_bytes"]) / GB,
        "ratio": {
            key: lora[key] / full[key]
            for key in ("trainable", "model_bytes", "optimizer_state_bytes", "checkpoint_bytes")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        demo_part = measure_demo(args.workdir or Path(tmp))
    print(json.dumps({"demo": summary(demo_part), "8b": summary(arithmetic_8b())}))


if __name__ == "__main__":
    main()
