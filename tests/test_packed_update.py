"""benchmarks/packed_update.py's batch through ``grpo.update`` on a real tiny Qwen2.5-VL (vision sync
on, as training runs it): packed and padded give the same loss and weights, and the packed variant
computes on the sum of the lengths only (with sdpa per sequence, or transformers' block mask)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "packed_update_benchmark", ROOT / "benchmarks" / "packed_update.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_frame_counts_span_the_range(bench: ModuleType) -> None:
    assert bench.frame_counts(8, 18) == [2, 4, 6, 8, 12, 14, 16, 18]
    assert bench.frame_counts(2, 8) == [2, 8]


@pytest.mark.slow
def test_packed_and_padded_updates_agree(bench: ModuleType, tmp_path: Path) -> None:
    model = bench.build_model(tmp_path / "model", width=64, layers=2)
    args = argparse.Namespace(rows=4, max_frames=8, response=6, repeats=1, threads=1)
    packed = bench.run_variant(str(model), "packed", args)
    padded = bench.run_variant(str(model), "padded", args)
    block_mask = bench.run_variant(str(model), "block_mask", args)
    lengths = packed["lengths"]
    assert max(lengths) > 2 * min(lengths)
    assert packed["positions"] == sum(lengths) and padded["positions"] == 4 * max(lengths)
    for other in (padded, block_mask):
        assert packed["loss"] == pytest.approx(other["loss"], abs=1e-6)
        assert max(abs(a - b) for a, b in zip(packed["weights"], other["weights"])) < 1e-5
