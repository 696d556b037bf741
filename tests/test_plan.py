"""``videorl plan``: the memory plan of two real model shapes (built on meta from their config), each
figure within 15 % of hand arithmetic written here, what does not fit and the setting that would
(rounded the safe way), split placement, and a bare ``config.json`` (``--shape``).

Hand arithmetic: GB = 10⁹ B; P parameters; the published shapes of Qwen2.5-VL-7B and Qwen3-VL-8B."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from videorl.config import load_config
from videorl.diagnostics.plan import ModelShape, Placement, _floor2, plan, sequence_tokens
from videorl.diagnostics.shapes import SHAPES
from videorl.plugins import load_plugins

GB = 1e9
TOLERANCE = 0.15


def _model(tmp_path: Path, name: str) -> Path:
    """A tiny checkpoint of the family (its tokenizer counts the prompt) with the published shape."""
    from videorl_models.tiny import build_tiny

    shape = SHAPES[name]
    model = build_tiny(shape["model_type"], tmp_path / name, seed=0)
    config = json.loads((model / "config.json").read_text())
    for key, values in shape.items():
        config[key] = {**config[key], **values} if isinstance(values, dict) else values
    (model / "config.json").write_text(json.dumps(config))
    return model


def _plan(model: Path, placement: Placement, *overrides: str, config_file: Path | None = None) -> Any:
    from videorl.train.compose import make_backend

    config = load_config(
        config_file,
        [f"model.path={model}", *([] if config_file else ["data.train_files=[unused.jsonl]"]), *overrides],
    )
    backend = make_backend(config, load_plugins())
    shape = ModelShape.of(backend.load_model(device=torch.device("meta")), backend)
    return shape, plan(
        config, shape, placement, sequence_tokens(config, backend, config.data.visual_budget(backend.budget))
    )


def _close(planned: dict[str, float], hand: dict[str, float]) -> None:
    off = {k: (planned[k], round(v, 3)) for k, v in hand.items() if abs(planned[k] - v) > TOLERANCE * v}
    assert not off, f"plan vs hand beyond {TOLERANCE:.0%}: {off}"


def test_qwen2_5_vl_7b_torchrun_on_8_gpus_of_80_gb(tmp_path: Path) -> None:
    model = _model(tmp_path, "qwen2_5_vl-7b")
    shape, result = _plan(model, Placement(8, 80))
    P = 8_292_166_656  # Qwen2.5-VL-7B: 8.29 B
    assert shape.parameters == P
    root = 2 * 152_064 * 3_584  # embeddings and LM head, untied
    layer = 2 * 3_584**2 + 2 * 3_584 * 512 + 3 * 3_584 * 18_944  # q, o; k, v (4 KV heads); MLP
    vision_unit = 2 * 14 * 14 * 3 * 1_280 + 5_120**2 + 5_120 * 3_584  # patch embedding, merger
    visual, prompt = 64 * 18 * 18, 20_736 + 231  # 128 frames of 504 x 504: 64 groups of 18 x 18 tokens
    assert result.sequence["visual"] == visual
    seq = prompt + 4_096  # one sequence per 24,096-token micro-batch: the micro-batch is the sequence
    patches = 4 * visual
    _close(
        result.update,
        {
            "states": 16 * P / 8 / GB,
            "gathered_weights": 2 * (root + 2 * layer + vision_unit) / GB,
            "unsharded_gradients": (2 + 4) * (root + layer) / GB,  # bf16, and its float32 reduce copy
            "text_checkpoints": 28 * seq * 3_584 * 2 / GB,
            "recomputed_layer": seq * (5 * 3_584 + 2 * 512 + 3 * 18_944) * 2 / GB,
            "vision_checkpoints": 32 * patches * 1_280 * 2 / GB,
            "logits": (2 * 4_097 * 152_064 * 2 + 4 * 1_024 * 152_064 * 4) / GB,
            "total": 54.6,
        },
    )
    kv_per_token = 2 * 28 * 4 * 128 * 2  # 57,344 B
    kv = 0.7 * 80 - 2 * P / GB - 6  # vLLM's default share, 0.7
    _close(
        result.rollout,
        {
            "engine_share": 56.0,
            "engine_weights": 2 * P / GB,
            "kv_cache": kv,
            "kv_tokens": kv * GB / kv_per_token,
            "total": 16 * P / 8 / GB + 56 + 4,
        },
    )
    assert result.rollout["groups_at_once"] == int(kv * GB / (kv_per_token * (prompt + 8 * 4_096)))  # 8
    per_prompt = 128 * 3 * 504 * 504 + patches * 3 * 2 * 14 * 14  # uint8 frames, uint8 patches
    _close(
        result.host_per_node,
        {
            "prompts": 8 * 2 * (256 // 8) * per_prompt / GB,  # 8 ranks, this batch and the prefetched one
            "weight_refresh": 8 * 2 * P / GB,
            "checkpoint_staging": 8 * 12 * P / 8 / GB,
            "engine_front_ends": 8 * 12.0,
            "load_rank0": 4 * P / GB,
        },
    )
    assert result.fits


def test_qwen3_vl_8b_ray_split_on_32_gpus_as_examples_multi_node(tmp_path: Path) -> None:
    model = _model(tmp_path, "qwen3_vl-8b")
    example = Path(__file__).resolve().parents[1] / "examples" / "multi-node.yaml"
    shape, result = _plan(model, Placement(32, 141, nodes=4), config_file=example)
    P = 8_767_123_696
    assert shape.parameters == P  # docs/multi-node.md's count, by hand
    assert (shape.decoder_layer, shape.root) == (192_946_432, 1_244_663_808)
    layout = result.layout
    assert (layout.split, layout.actor_gpus, layout.engines, layout.engine_gpus, layout.tp) == (
        True,
        16,
        8,
        2,
        2,
    )
    visual, prompt = 16_384, 17_100
    _close(
        result.update,
        {
            "states": 16 * P / 16 / GB,  # 16 actor ranks, not 32
            "gathered_weights": 3.59,
            "unsharded_gradients": 6 * (1_244_663_808 + 192_946_432) / GB,
            "text_checkpoints": 36 * 24_096 * 4_096 * 2 / GB,
            "recomputed_layer": 24_096 * (5 * 4_096 + 2 * 1_024 + 3 * 12_288) * 2 / GB,
            "vision_checkpoints": 27 * 4 * visual * 1_152 * 2 / GB,
            "visual_features": 4 * visual * 4_096 * 2 / GB,
            "logits": (2 * 4_097 * 151_936 * 2 + 4 * 1_024 * 151_936 * 4) / GB,
            "total": 44.6,
        },
    )
    assert "engine_asleep" not in result.update and "states" not in result.rollout  # GPUs apart
    kv_per_token = 2 * 36 * 8 * 128 * 2 / 2  # TP 2 splits the heads: 73,728 B
    kv = 0.9 * 141 - 2 * P / 2 / GB - 6
    _close(
        result.rollout,
        {
            "engine_share": 126.9,
            "engine_weights": P / GB,
            "kv_cache": kv,
            "kv_tokens": kv * GB / kv_per_token,
        },
    )
    assert result.rollout["groups_at_once"] == int(kv * GB / (kv_per_token * (prompt + 8 * 4_096))) == 30
    per_prompt = 128 * 3 * 512 * 512 + 4 * visual * 3 * 2 * 16 * 16
    _close(
        result.host_per_node,
        {
            "prompts": 8 * 2 * (256 // 16) * per_prompt / GB,
            "weight_refresh": 8 * 2 * P / GB,
            "checkpoint_staging": 8 * 12 * P / 16 / GB,
            "rollout_node_prompts": 4 * 2 * (256 // 8) * per_prompt / GB,  # 4 engines of 2 GPUs a node
            "rollout_node_weights": 4 * 2 * P / GB,
            "rollout_node_engines": 4 * 12.0,
        },
    )
    assert result.fits
    # fewer GPUs than the layout needs is a finding
    _, small = _plan(model, Placement(16, 141, nodes=2), config_file=example)
    assert any("= 32 > --gpus 16" in f for f in small.findings)


def test_advice_is_rounded_the_safe_way_and_fits(tmp_path: Path) -> None:
    assert _floor2(0.895) == 0.89 and _floor2(0.9) == 0.9 and _floor2(0.12999) == 0.12
    model = _model(tmp_path, "qwen2_5_vl-7b")
    # two GPUs: 66 GB of states each; the rollout needs a smaller engine share, the update more GPUs
    _, two = _plan(model, Placement(2, 80), "rollout.engine_options={enable_sleep_mode: false}")
    assert two.update["states"] == 66.34 and "engine_awake" in two.update
    update = next(f for f in two.findings if f.startswith("update phase"))
    assert "enable_sleep_mode=true" in update
    advice = next(f for f in two.findings if f.startswith("rollout phase"))
    room = float(advice.split("gpu_memory_utilization <= ")[1].split(",")[0])
    assert room == 0.12  # (80 - 66.34 - 4) / 80 = 0.1207..., rounded down
    _, advised = _plan(model, Placement(2, 80), f"rollout.engine_options={{gpu_memory_utilization: {room}}}")
    assert advised.rollout["total"] <= 80
    # the seed's prompt limit is below what the default budget gives for Qwen2.5-VL
    _, short = _plan(model, Placement(8, 80), "data.max_prompt_length=20000")
    assert [f for f in short.findings if "data.max_prompt_length (20000)" in f]
    # host memory, when given, is checked
    _, host = _plan(model, Placement(8, 80, host_memory_gb=256))
    assert any(f.startswith("host memory: ") for f in host.findings)


def test_the_command_plans_a_bare_shape_without_a_checkpoint(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from videorl.cli import make_cli

    config = tmp_path / "run.yaml"
    config.write_text("model:\n  path: /nowhere\ndata:\n  train_files: [unused.jsonl]\n")
    cli = make_cli(load_plugins())
    args = [
        "plan",
        str(config),
        "--shape",
        "qwen3_vl-8b",
        "--gpus",
        "32",
        "--gpu-memory",
        "141",
        "--nodes",
        "4",
    ]
    done = CliRunner().invoke(
        cli, [*args, "rollout.engine_options={tensor_parallel_size: 2}"], obj=load_plugins()
    )
    assert done.exit_code == 0, done.output
    assert "8.77 B parameters" in done.output and "estimated, no tokenizer" in done.output
    assert done.output.splitlines()[-1] == "fits"
    done = CliRunner().invoke(
        cli, ["plan", str(config), "--shape", "qwen3_vl-8b", "--gpus", "2", "--gpu-memory", "80", "--json"]
    )
    assert done.exit_code == 0, done.output
    findings = json.loads(done.output)["findings"]
    assert findings and findings[0].startswith("update phase")
    done = CliRunner().invoke(
        cli, ["plan", str(config), "--shape", "qwen9-1t", "--gpus", "1", "--gpu-memory", "8"]
    )
    assert done.exit_code != 0 and "unknown shape" in done.output


@pytest.mark.parametrize("gpus, nodes", [(0, 1), (6, 4)])
def test_placements_that_cannot_be(gpus: int, nodes: int) -> None:
    from videorl.errors import ConfigError

    with pytest.raises(ConfigError, match="must be a positive multiple of --nodes"):
        Placement(gpus, 80, nodes)


def _long_video(tmp_path: Path, sp: int, shards_tower: bool = True) -> tuple[ModelShape, Any]:
    """Long-RL's budget on Qwen2.5-VL-7B, 8 GPUs of 141 GB, sequence parallel ``sp``: one video of
    3,600 frames at 60 visual tokens each (120 per temporal group of 2 frames: 94,080 pixels, 120
    tokens of 28 x 28 pixels), the question, a 1,024-token response; the tower trainable,
    gradient checkpointing on. ``shards_tower=False``: as a family whose tower is not sharded."""
    from dataclasses import replace

    from videorl.train.compose import make_backend

    config = load_config(
        None,
        [
            f"model.path={_model(tmp_path, 'qwen2_5_vl-7b')}",
            "data.train_files=[unused.jsonl]",
            "data.max_prompt_length=220000",
            "data.video_max_frames=3600",
            "rollout.max_response_length=1024",
            "actor.gradient_checkpointing=true",
            f"actor.sequence_parallel_size={sp}",
        ],
    )
    backend = make_backend(config, load_plugins())
    shape = ModelShape.of(backend.load_model(device=torch.device("meta")), backend)
    shape = replace(shape, shards_tower=shape.shards_tower and shards_tower)
    visual = 3_600 * 60  # 216,000
    prompt = visual + 2 + 200  # vision start/end, the question
    seq = {
        "prompt": prompt,
        "visual": visual,
        "response": 1_024,
        "sequence": prompt + 1_024,  # 217,226
        "frames": 3_600,
        "frame_pixels": 120 * 28 * 28,
        "estimated": 0,
    }
    return shape, plan(config, shape, Placement(8, 141), seq)


def test_long_video_at_sequence_parallel_8_on_qwen2_5_vl_7b(tmp_path: Path) -> None:
    shape, result = _long_video(tmp_path, 8)
    assert (shape.heads, shape.vision_intermediate) == (28, 3_420)
    assert shape.shards_tower  # Qwen2.5-VL's backend shards the tower by temporal patches
    P = 8_292_166_656
    root = 2 * 152_064 * 3_584
    layer = 2 * 3_584**2 + 2 * 3_584 * 512 + 3 * 3_584 * 18_944
    vision_unit = 2 * 14 * 14 * 3 * 1_280 + 5_120**2 + 5_120 * 3_584
    tokens = -(-217_226 // 8)  # 27,154 tokens of the sequence per rank through the decoder layers
    patches = 4 * 216_000 // 8  # 108,000: the rank's share of the video's 864,000 patches
    hand = {
        "states": 16 * P / 8 / GB,  # 16.58
        "gathered_weights": 2 * (root + 2 * layer + vision_unit) / GB,  # 3.20
        "unsharded_gradients": 6 * (root + layer) / GB,  # 7.94
        "text_checkpoints": 28 * tokens * 3_584 * 2 / GB,  # 5.45: 1/8 of the sequence's
        # a decoder layer's working set over the rank's tokens (4.12) outweighs the vision block's
        # over the rank's patches, 108,000 * (7 * 1,280 + 2 * 3,420) * 2 = 3.41
        "recomputed_layer": tokens * (5 * 3_584 + 2 * 512 + 3 * 18_944) * 2 / GB,
        "vision_checkpoints": 32 * patches * 1_280 * 2 / GB,  # 8.85: 1/8 of the video's 70.78
        "visual_features": 216_000 * 3_584 * 2 / GB,  # 1.55: all-gathered, whole on every rank
        "logits": (2 * 1_025 * 152_064 * 2 + 4 * 1_024 * 152_064 * 4) / GB,  # 3.11
        # + 4 overhead + 2 the sleeping engine
        "total": 56.80,
    }
    off = {k: (result.update[k], round(v, 3)) for k, v in hand.items() if abs(result.update[k] - v) > 0.01}
    assert not off, off  # each figure to its rounding
    assert not result.fits
    # k = 8 does not divide Qwen2.5-VL-7B's 28 heads: Ulysses cannot split them; 1, 2 or 4 can
    assert any("sequence_parallel_size=8: must divide" in f and "[1, 2, 4]" in f for f in result.findings)
    assert not any("not sharded by frames" in f for f in result.findings)
    # The longest video that fits: each frame adds 60 tokens (28 * 3,584 * 2 / 8 B each in the text
    # checkpoints, 7,168 B each in the visual features, 151,424 / 8 B each in the decoder layer's
    # working set) and 240 / 8 patches per rank (32 * 1,280 * 2 B each in the vision checkpoints):
    # 5.53 MB a frame; 141 - 56.80 GB leaves room for 15,228 more frames (a multiple of 2). The
    # engine's KV cache (0.7 * 141 - 16.58 - 6 GB at 57,344 B a token: 1.33 M tokens) holds its
    # 1.13 M-token sequence.
    per_frame = 60 * (28 * 3_584 * 2 / 8 + 3_584 * 2 + 151_424 / 8) + 240 / 8 * (32 * 1_280 * 2)
    total = sum(v for k, v in hand.items() if k != "total") + 6
    want = 3_600 + 2 * math.floor((141 - total) * GB / per_frame / 2)
    assert result.longest["frames"] == want == 18_828, (result.longest, want)
    assert result.longest["sequence"] * 57_344 <= (0.7 * 141 - 2 * P / GB - 6) * GB
    # host: each of the 8 ranks holds its data group's 256 prompts (one group of 8: the first rank's
    # rollout, received), and the first also the next batch (prefetch): 9 x 256 prompts of uint8
    # frames (3,600 x 3 x 94,080) and uint8 patches (864,000 x 3 x 2 x 14 x 14), 2.03 GB each
    per_prompt = 3_600 * 3 * 94_080 + 4 * 216_000 * 3 * 2 * 14 * 14
    assert abs(result.host_per_node["prompts"] - 9 * 256 * per_prompt / GB) < 0.01


def test_long_video_at_sequence_parallel_4_fits_with_the_tower_sharded(tmp_path: Path) -> None:
    _, result = _long_video(tmp_path, 4)
    # k = 4 is valid; the text checkpoints double to 10.90 GB (54,307 tokens per rank), the vision
    # checkpoints to 17.69 GB (216,000 patches per rank), the decoder layer's working set to 8.23
    # GB: 75.22 GB, which fits 141 GB
    assert abs(result.update["text_checkpoints"] - 28 * 54_307 * 3_584 * 2 / GB) < 0.01
    assert abs(result.update["vision_checkpoints"] - 32 * 216_000 * 1_280 * 2 / GB) < 0.01
    assert abs(result.update["total"] - 75.22) < 0.05 and result.fits and not result.findings
    # per frame 60 * (28 * 3,584 * 2 / 4 + 7,168 + 151,424 / 4) + 60 * 81,920 = 10.63 MB: 6,190 more
    assert result.longest["frames"] == 9_790


def test_long_video_without_a_sharded_tower_names_the_tower(tmp_path: Path) -> None:
    """A family whose backend does not shard the tower: its 864,000 patches on every rank."""
    _, result = _long_video(tmp_path, 4, shards_tower=False)
    # the vision checkpoints 70.78 GB and the block's working set 27.30 GB instead of 17.69 and the
    # text layer's 8.23: 75.22 + 53.09 + 19.07 = 147.36 GB
    assert abs(result.update["vision_checkpoints"] - 32 * 864_000 * 1_280 * 2 / GB) < 0.01
    assert abs(result.update["total"] - 147.36) < 0.05 and not result.fits
    update = next(f for f in result.findings if f.startswith("update phase"))
    assert "actor.sequence_parallel_size=" not in update  # no valid size fits: the tower is the excess
    assert "not sharded by frames" in update and result.longest["frames"] < 3_600
