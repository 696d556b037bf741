"""Sequence parallelism (Ulysses) on two (and four) gloo ranks equals one process on the same micro-batch.

The micro-batch (``sp_step.py``) packs a text prompt, a long video prompt, a video-plus-image prompt
and a two-video prompt into one row cut between the two ranks inside a temporal patch of the long
video; the vision tower is sharded by temporal patches (each rank encodes about half of them, the
embeddings all-gathered). Log-probs and entropies must match within 1e-5, and every parameter's
gradient (vision tower included) within 1e-5 relative to its largest entry; Qwen3-VL's DeepStack
features are sharded with the tower and sliced with the tokens. Skipping the all-to-all
(each rank attends only over its own tokens) or the tower's all-gather (each rank sees only the
embeddings it encoded) must break the match: the check can fail. Four ranks (a tiny Qwen2.5-VL of
width 128, whose 4 heads ``k = 4`` splits) run the same micro-batch in quarters, to the same bounds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from videorl.actor.tower_shard import TowerShard
from videorl.actor.ulysses import check_size, install_sequence_parallel, valid_sizes
from videorl.errors import ConfigError
from videorl_models.vision_shard import unit_keys

SCRIPT = Path(__file__).with_name("sp_step.py")


def _run(model_dir: Path, out: Path, size: int, *flags: str) -> list[dict[str, Any]]:
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(model_dir), str(out), str(size), *flags],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(size)]
    assert done.returncode == 0 and all(r["ok"] for r in ranks), (ranks, done.stderr[-3000:])
    return ranks


def _differences(out: Path, sharded: str = "sp", single: str = "single") -> tuple[float, float, int]:
    """The largest log-prob/entropy difference, the largest relative gradient difference, and how
    many parameters have a gradient (of the ``sharded`` run's results against ``single``'s)."""
    from safetensors.torch import load_file

    got, want = load_file(str(out / f"{sharded}.safetensors")), load_file(str(out / f"{single}.safetensors"))
    assert got.keys() == want.keys()
    stats = max((got[k] - want[k]).abs().max().item() for k in ("logp", "entropy"))
    worst, trained = 0.0, 0
    for key in (k for k in want if k.startswith("grad/")):
        scale = want[key].abs().max().item()
        if scale == 0:
            assert got[key].abs().max().item() == 0, key
            continue
        trained += 1
        worst = max(worst, (got[key] - want[key]).abs().max().item() / scale)
    return stats, worst, trained


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl"])
def test_two_ranks_give_the_one_process_log_probs_and_gradients(
    model_type: str, tiny_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    ranks = _run(tiny_dir(model_type), tmp_path / "run", 2, "--tower-checks")
    report = ranks[0]
    video = report["video_id"]
    assert report["cuts"] == [[video, video]]  # the ranks' cut lies inside the video,
    assert report["video_run"][0] % 16  # inside one of its temporal patches (16 tokens each)
    stats, grads, trained = _differences(tmp_path / "run")
    assert stats < 1e-5 and grads < 1e-5, (stats, grads)
    assert trained > 50  # every parameter has a gradient, the vision tower's too
    # the tower encodes 600 patches in one process (an 8x8-patch frame pair is 64): the long video's
    # 8 x 64, the other videos' 5 x 16, the image's 8; the two ranks split them by whole temporal
    # patches in row order, the cut where half the patches (300) lies: 5 x 64 | 3 x 64 + 5 x 16 + 8
    assert sum(report["single_tower_patches"]) == 600
    assert [r["tower_patches"] for r in ranks] == [[320], [280]]
    # a lone image is one temporal patch (8 patches): rank 1 encodes it (its middle, 4 of 8, is the
    # half), rank 0 runs the zero-weighted dummy (16 zero patches); the results are one process's
    assert [r["lone_tower_patches"] for r in ranks] == [[16], [8]]
    stats, grads, trained = _differences(tmp_path / "run", "sp_lone", "single_lone")
    assert stats < 1e-5 and grads < 1e-5 and trained > 50, (stats, grads, trained)
    # a backend without the sharding hook: the whole tower on every rank, the same results
    assert [sum(r["whole_tower_patches"]) for r in ranks] == [600, 600]
    stats, grads, _ = _differences(tmp_path / "run", "sp_whole_tower")
    assert stats < 1e-5 and grads < 1e-5, (stats, grads)
    # the control: without the tower's all-gather each rank lacks the other's embeddings
    stats, grads, _ = _differences(tmp_path / "run", "sp_no_tower_exchange")
    assert stats > 1e-3 and grads > 1e-3, (stats, grads)


@pytest.mark.slow
def test_four_ranks_give_the_one_process_log_probs_and_gradients(tmp_path: Path) -> None:
    from videorl_models.tiny import build_tiny

    # width 128: 4 query heads (k = 4 splits them), 2 key/value heads (repeated to 4 for the split)
    model_dir = build_tiny("qwen2_5_vl", tmp_path / "model", seed=0, width=128)
    ranks = _run(model_dir, tmp_path / "run", 4)
    report = ranks[0]
    video = report["video_id"]
    assert [video, video] in report["cuts"]  # a cut between ranks lies inside the long video
    stats, grads, trained = _differences(tmp_path / "run")
    assert stats < 1e-5 and grads < 1e-5, (stats, grads)
    assert trained > 50  # every parameter has a gradient, the vision tower's too
    # the 600 patches in quarters of 150 by the middle of each unit in row order: the long video's
    # 8 x 64 have middles 32, 96 | 160, 224, 288 | 352, 416 | 480, then the other 88 patches (rank 3)
    assert sum(report["single_tower_patches"]) == 600
    assert [r["tower_patches"] for r in ranks] == [[128], [192], [128], [152]]
    print(f"k=4 vs one process: log-probs within {stats:.1e}, gradients within {grads:.1e}")  # docs


@pytest.mark.slow
def test_without_the_exchange_the_results_differ(tiny_dir: Callable[[str], Path], tmp_path: Path) -> None:
    _run(tiny_dir("qwen2_5_vl"), tmp_path / "run", 2, "--no-exchange")
    stats, grads, _ = _differences(tmp_path / "run")
    assert stats > 1e-3 and grads > 1e-3, (stats, grads)


def test_the_tower_units_go_to_ranks_in_row_order_by_patch_count() -> None:
    shard = TowerShard(None, 2, 0)
    # weights 4, 4, 1, 1, 2 in key order (keys 10, 20, 30, 35, 50); total 12, half 6: the middles
    # lie at 2, 6, 8.5, 9.5, 11: the second unit's middle is the half, so it goes to rank 1
    assert shard.assign([20, 10, 50, 30, 35], [4, 4, 2, 1, 1]) == [1, 0, 1, 1, 1]
    assert TowerShard(None, 4, 0).assign([0, 1, 2, 3], [1, 1, 1, 1]) == [0, 1, 2, 3]
    assert TowerShard(None, 4, 0).assign([0], [5]) == [2]  # fewer units than ranks: the others idle


def test_a_temporal_patch_is_keyed_by_its_first_token_where_first_used() -> None:
    # two uses of distinct item 0 (grid 2x4x4: 4 tokens per temporal patch, merge 2), one of item 1
    rows = list(range(100, 108)) + list(range(200, 204)) + list(range(50, 58))
    grids = [(2, 4, 4), (1, 4, 4), (2, 4, 4)]
    assert unit_keys(rows, grids, [0, 1, 0], 2) == {0: [50, 54], 1: [200]}
    with pytest.raises(ValueError, match="placeholders"):
        unit_keys(rows[:-1], grids, [0, 1, 0], 2)


def test_which_backends_shard_the_tower() -> None:
    from videorl.backend import shards_vision_tower
    from videorl_models.qwen2_5_vl import Qwen2_5VLBackend
    from videorl_models.qwen3_5 import Qwen3_5Backend
    from videorl_models.qwen3_vl import Qwen3VLBackend

    assert shards_vision_tower(Qwen2_5VLBackend) and shards_vision_tower(Qwen3VLBackend)
    assert not shards_vision_tower(Qwen3_5Backend)  # it declines sequence parallelism
    assert not shards_vision_tower(object())  # no hook: the whole tower on every rank


def test_a_size_that_does_not_divide_the_heads_names_those_that_do() -> None:
    assert valid_sizes(28, 8) == [1, 2, 4]
    check_size(4, 28, 8, "qwen2_5_vl")
    with pytest.raises(ConfigError, match=r"3 does not divide 28.*8 processes: \[1, 2, 4\]"):
        check_size(3, 28, 8, "qwen2_5_vl")


def test_families_that_cannot_shard_say_why() -> None:
    from videorl_models.qwen3_5 import Qwen3_5Backend

    with pytest.raises(ConfigError, match="qwen3_5 backend cannot shard sequences.*linear-attention"):
        install_sequence_parallel(None, Qwen3_5Backend, None, 2, 0)
