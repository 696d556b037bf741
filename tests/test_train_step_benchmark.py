"""benchmarks/train_step.py: its emulation of EasyR1's per-stage decoding trains exactly like the cached
mode (same tokens every step), decodes where EasyR1 decodes, and its report does the right arithmetic."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from videorl.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "train_step_benchmark", ROOT / "benchmarks" / "train_step.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_stage_seconds_split_the_reference_out_of_the_actor_time(bench: ModuleType) -> None:
    row = {"time/data": 1.0, "time/rollout": 2.0, "time/reference": 0.5, "time/actor": 3.5, "time/step": 7.0}
    assert bench.stage_seconds(row) == {
        "data": 1.0,
        "rollout": 2.0,
        "reference": 0.5,
        "actor_update": 3.0,
        "step": 7.0,
    }


def test_summarise_takes_medians_and_ratios_and_refuses_different_tokens(bench: ModuleType) -> None:
    def row(step: float, tokens: float) -> dict[str, float]:
        return {
            "time/data": step / 10,
            "time/rollout": step / 2,
            "time/reference": step / 5,
            "time/actor": step / 5 * 2,
            "time/step": step,
            "tokens/step": tokens,
            "loads/data": 2.0,
            "media_seconds/data": step / 10,
        }

    runs = {
        "realtime_only": [[row(9.0, 100), row(3.0, 90)], [row(6.0, 80)]],
        "preprocessed_only": [[row(2.0, 100), row(4.0, 90)], [row(3.0, 80)]],
    }
    out = bench.summarise(runs)
    assert out["realtime_only"]["step"] == 6.0 and out["preprocessed_only"]["step"] == 3.0  # medians
    assert out["ratio"]["step"] == pytest.approx(2.0)
    assert out["ratio"]["actor_update"] == pytest.approx(2.0)  # (0.4 - 0.2)·6 / (0.4 - 0.2)·3
    assert out["realtime_only"]["tokens_per_step"] == 90.0
    assert out["realtime_only"]["tokens_per_s"] == pytest.approx(15.0)
    assert out["realtime_only"]["loads_per_step"] == {"data": 2.0}
    assert out["tokens_identical"] is True
    # media time = the data stage: compute pooled over both modes, only the media medians differ
    assert out["ratio_same_compute"]["data"] == pytest.approx(0.6 / 0.3)
    assert out["ratio_same_compute"]["rollout"] == pytest.approx(1.0)  # no media in it here
    assert out["compute_seconds"]["step"] == pytest.approx((2.7 + 3.6) / 2)  # median of 0.9·step
    assert out["ratio_same_compute"]["step"] == pytest.approx((3.15 + 0.6) / (3.15 + 0.3))
    runs["preprocessed_only"][1][0]["tokens/step"] = 81
    with pytest.raises(AssertionError, match="tokens per step differ"):
        bench.summarise(runs)


@pytest.mark.slow
def test_both_modes_train_identically_and_realtime_decodes_at_every_stage(
    bench: ModuleType, tiny_model_dir: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from videorl.config import load_config
    from videorl.media import DecodeParams, build_cache
    from videorl.media import cache as cache_module
    from videorl.plugins import load_plugins
    from videorl_models.qwen3_vl import Qwen3VLBackend

    plugins = load_plugins()
    model = tiny_model_dir("qwen3_vl")
    (tmp_path / "prompt.jinja").write_text(bench.PROMPT, encoding="utf-8")
    clips = bench.write_clips(tmp_path / "clips", 2, height=64, width=96, seconds=2.0, fps=8.0)
    dataset = bench.write_dataset(tmp_path / "train.jsonl", clips)
    frames, pixels = 4, 64 * 64
    params = DecodeParams(
        factor=Qwen3VLBackend.factor,
        temporal_patch_size=2,
        fps=2.0,
        max_frames=frames,
        min_pixels=pixels,
        max_pixels=pixels,
    )
    assert build_cache(clips, params, bench.cache_dir(tmp_path, frames, pixels), progress=False).ok

    decodes = []
    real_decode = cache_module.decode_video

    def counting_decode(*args: Any, **kwargs: Any) -> Any:
        decodes.append(args[0])
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(cache_module, "decode_video", counting_decode)
    rows = {}
    for mode in bench.MODES:
        decodes.clear()
        options = bench.overrides(
            tmp_path,
            model,
            dataset,
            mode,
            run=mode,
            prompts=2,
            n=2,
            steps=2,
            frames=frames,
            max_pixels=pixels,
            response=4,
            seed=0,
        )
        # one sequence per micro-batch: four reference forwards per step, still one load per prompt
        config: TrainConfig = load_config(None, [*options, "actor.max_tokens_per_micro_batch=1"])
        rows[mode] = bench.run_mode(config, plugins)
        # 2 prompts × (data, rollout, reference) × 2 steps decoded in realtime mode; none when cached
        assert len(decodes) == (12 if mode == "realtime_only" else 0), mode
    for mode, steps in rows.items():
        assert len(steps) == 2
        for step in steps:
            assert {k: v for k, v in step.items() if k.startswith("loads/")} == {
                "loads/data": 2.0,
                "loads/rollout": 2.0,
                "loads/reference": 2.0,
            }, mode
            assert step["time/reference"] > 0
    realtime, cached = rows["realtime_only"], rows["preprocessed_only"]
    assert [s["tokens/step"] for s in realtime] == [s["tokens/step"] for s in cached]
    for a, b in zip(realtime, cached):
        assert a["actor/loss"] == b["actor/loss"] and a["actor/kl"] == b["actor/kl"]
    assert realtime[1]["actor/kl"] != 0.0  # the first update moved the policy away from the reference
