"""Sequence parallelism (Ulysses) on two gloo ranks equals one process on the same micro-batch.

The micro-batch (``sp_step.py``) packs a text prompt, a long video prompt and a video-plus-image
prompt into one row cut between the two ranks inside the long video. Log-probs and entropies must
match within 1e-5, and every parameter's gradient (vision tower included) within 1e-5 relative to
its largest entry. Skipping the all-to-all (each rank attends only over its own tokens) must break
the match: the check can fail.
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

from videorl.actor.ulysses import check_size, install_sequence_parallel, valid_sizes
from videorl.errors import ConfigError

SCRIPT = Path(__file__).with_name("sp_step.py")


def _run(model_dir: Path, out: Path, size: int, *flags: str) -> dict[str, Any]:
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
    return dict(ranks[0])


def _differences(out: Path) -> tuple[float, float, int]:
    """The largest log-prob/entropy difference, the largest relative gradient difference, and how
    many parameters have a gradient."""
    from safetensors.torch import load_file

    got, want = load_file(str(out / "sp.safetensors")), load_file(str(out / "single.safetensors"))
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
@pytest.mark.parametrize("model_type", ["qwen2_5_vl", "qwen2_vl"])
def test_two_ranks_give_the_one_process_log_probs_and_gradients(
    model_type: str, tiny_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    report = _run(tiny_dir(model_type), tmp_path / "run", 2)
    video = report["video_id"]
    assert report["cuts"] == [[video, video]]  # the ranks' cut lies inside the video
    stats, grads, trained = _differences(tmp_path / "run")
    assert stats < 1e-5 and grads < 1e-5, (stats, grads)
    assert trained > 50  # every parameter has a gradient, the vision tower's too


@pytest.mark.slow
def test_without_the_exchange_the_results_differ(tiny_dir: Callable[[str], Path], tmp_path: Path) -> None:
    _run(tiny_dir("qwen2_5_vl"), tmp_path / "run", 2, "--no-exchange")
    stats, grads, _ = _differences(tmp_path / "run")
    assert stats > 1e-3 and grads > 1e-3, (stats, grads)


def test_a_size_that_does_not_divide_the_heads_names_those_that_do() -> None:
    assert valid_sizes(28, 8) == [1, 2, 4]
    check_size(4, 28, 8, "qwen2_5_vl")
    with pytest.raises(ConfigError, match=r"3 does not divide 28.*8 processes: \[1, 2, 4\]"):
        check_size(3, 28, 8, "qwen2_5_vl")


def test_families_that_cannot_shard_say_why() -> None:
    from videorl_models.qwen3_5 import Qwen3_5Backend
    from videorl_models.qwen3_vl import Qwen3VLBackend

    with pytest.raises(ConfigError, match="qwen3_vl backend cannot shard sequences.*deepstack"):
        install_sequence_parallel(None, Qwen3VLBackend, None, 2, 0)
    with pytest.raises(ConfigError, match="qwen3_5 backend cannot shard sequences.*linear-attention"):
        install_sequence_parallel(None, Qwen3_5Backend, None, 2, 0)
