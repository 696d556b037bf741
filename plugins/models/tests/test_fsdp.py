"""FSDP2 on two gloo ranks, one with a video sample and one text-only: a full optimizer step.

With the vision sync's dummy forward the step equals the single-process step on the mean gradient;
without it the ranks disagree on which parameters they gather and reduce, and the job fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("fsdp_step.py")


def _run(model_dir: Path, out: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(model_dir), str(out), *flags],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.mark.slow
def test_text_only_rank_with_the_dummy_matches_the_reference_step(
    tiny_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    done = _run(tiny_dir("qwen2_5_vl"), tmp_path / "run")
    ranks = [json.loads((tmp_path / "run" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert done.returncode == 0 and all(r["ok"] for r in ranks), (ranks, done.stderr[-3000:])
    assert [r["dummy_calls"] for r in ranks] == [0, 1]  # only the text-only rank needs the dummy
    got = load_file(str(tmp_path / "run" / "params.safetensors"))
    want = load_file(str(tmp_path / "run" / "reference.safetensors"))
    assert got.keys() == want.keys()
    assert max((got[k] - want[k]).abs().max().item() for k in got) < 1e-6
    from videorl_models.qwen2_5_vl import Qwen2_5VLBackend

    initial = dict(Qwen2_5VLBackend(tiny_dir("qwen2_5_vl")).load_model().named_parameters())
    tower = [k for k in got if k.startswith("model.visual.")]
    assert tower and all(not (got[k] == initial[k]).all() for k in tower)  # trained by the video rank


@pytest.mark.slow
def test_without_the_dummy_the_step_fails(tiny_dir: Callable[[str], Path], tmp_path: Path) -> None:
    try:
        done = _run(tiny_dir("qwen2_5_vl"), tmp_path / "run", "--no-dummy")
    except subprocess.TimeoutExpired:
        return  # a hang on mismatched collectives is the other way this fails
    assert done.returncode != 0
    assert not (tmp_path / "run" / "params.safetensors").exists()
