"""A preset given to ``build_training`` (the Python API, ``videorl demo``, ``benchmarks/algorithms.py``)
trains with its section keys too, not only with its estimator and loss: DAPO's dynamic sampling and
overlong shaping are what the loop reads and what the run's config.yaml records."""

from __future__ import annotations

from pathlib import Path

import yaml

from videorl import demo
from videorl.config import load_config
from videorl.plugins import load_plugins
from videorl.train.compose import build_training


def test_build_training_applies_the_presets_section_keys(tmp_path: Path) -> None:
    plugins = load_plugins()
    model, train, val = demo.prepare(tmp_path, plugins, family="qwen2_5_vl", seed=0, train=4, val=2)
    overrides = demo.demo_overrides(tmp_path, model, train, val, steps=1, seed=0, engine="hf")
    config = load_config(None, [*overrides, "algorithm.preset=dapo", "algorithm.overlong_buffer=4"])
    assert config.algorithm.dynamic_sampling is False  # loaded, not yet resolved
    training = build_training(config, plugins)
    try:
        cfg = training.config.algorithm
        assert (cfg.dynamic_sampling, cfg.overlong_buffer) == (True, 4)  # the preset's, and yours wins
        saved = yaml.safe_load((Path(config.output_dir) / "config.yaml").read_text())["algorithm"]
        assert (saved["dynamic_sampling"], saved["overlong_buffer"], saved["preset"]) == (True, 4, "dapo")
        assert saved["loss_options"] == {
            "clip_low": 0.2, "clip_high": 0.28, "loss_agg_mode": "token-mean", "clip_ratio_c": None,
        }  # fmt: skip
    finally:
        training.close()
