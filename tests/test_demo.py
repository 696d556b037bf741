"""The demo really learns: a shorter run of `videorl demo` lifts held-out accuracy well above chance."""

from __future__ import annotations

from pathlib import Path

import pytest

from videorl import demo
from videorl.plugins import load_plugins


@pytest.mark.slow
def test_a_short_demo_run_learns_the_colour_from_pixels(tmp_path: Path) -> None:
    result = demo.run(tmp_path, load_plugins(), steps=100, seed=0, val_clips=32, extra=["trainer.progress_bar=false"])
    assert result.before <= 0.3  # a random policy: chance (0.25) or worse, without the answer format
    assert result.after >= 0.5, f"held-out accuracy {result.after} after 100 steps (chance 0.25)"
    assert result.curve is not None and result.curve.stat().st_size > 10_000
    assert (result.run_dir / "checkpoints").is_dir()
