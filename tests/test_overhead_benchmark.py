"""benchmarks/overhead.py: its bare step replays exactly the tokens it is given, scores as the demo's
reward does, and its report does the right arithmetic (the timing itself is the script's to print)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("overhead_benchmark", ROOT / "benchmarks" / "overhead.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_forced_keeps_only_the_recorded_token_of_each_row(bench: ModuleType) -> None:
    forced = bench.Forced(torch.tensor([[3, 1], [0, 2]]), prompt_width=5)
    scores = torch.zeros(2, 4)
    first = forced(torch.zeros(2, 5, dtype=torch.long), scores.clone())  # the first new token
    second = forced(torch.zeros(2, 6, dtype=torch.long), scores.clone())
    assert first.argmax(-1).tolist() == [3, 0] and second.argmax(-1).tolist() == [1, 2]
    assert torch.isinf(first).sum() == 6 and (first.max(-1).values == 0).all()


def test_the_bare_reward_is_the_demos_rule(bench: ModuleType) -> None:
    reward = bench.BareStep._reward
    assert reward("<answer>B</answer>", "B") == pytest.approx(1.0)  # 0.9 accuracy + 0.1 format
    assert reward("<answer>A</answer>", "B") == pytest.approx(0.1)
    assert reward("<answer>A</answer> then <answer>B. green</answer>", "B") == pytest.approx(1.0)  # the last
    assert reward("B. green", "B") == pytest.approx(0.9) and reward("<think>A?</think> B", "B") == 0.9
    assert reward("green", "B") == 0.0


def test_summarise_takes_medians_and_ratios(bench: ModuleType) -> None:
    def row(v: float, b: float) -> dict[str, dict[str, float]]:
        stages = {"data": 0.0, "rollout": 1.0, "reward": 0.5, "actor": 2.0}
        return {"videorl": {**stages, "step": v}, "bare": {**stages, "data": 0.25, "step": b}}

    out = bench.summarise([row(4.0, 4.0), row(5.0, 4.25), row(9.0, 4.5)])
    assert out["seconds"]["videorl"]["step"] == 5.0 and out["seconds"]["bare"]["step"] == 4.25
    assert out["seconds"]["videorl"]["other"] == pytest.approx(1.5)  # median of 0.5, 1.5, 5.5
    assert out["seconds"]["bare"]["other"] == pytest.approx(0.5)  # median of 0.25, 0.5, 0.75
    assert out["ratio"]["step"] == pytest.approx(5.0 / 4.25) and out["ratio"]["data"] == 0.0
    assert out["ratio"]["actor"] == 1.0
