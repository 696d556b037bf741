"""A third-party algorithm (contrib/videorl-algorithm-gmpo) as a stranger uses it: built into a wheel,
installed into a throwaway folder, listed by ``videorl plugins``, and trained with for 2 steps.

The ``install_plugin`` fixture (tests/conftest.py) builds the wheel from a copy of the folder and
installs it with ``pip install --no-deps --target``; ``videorl`` runs in subprocesses with an empty HOME
and the folder on PYTHONPATH, so nothing is imported from the source tree and nothing is left in it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
GMPO = ROOT / "contrib" / "videorl-algorithm-gmpo"


def _litter(folder: Path) -> list[str]:
    names = {"build", "__pycache__", ".pytest_cache"}
    return sorted(str(p) for p in folder.rglob("*") if p.name in names or p.suffix == ".egg-info")


def _env(site: Path, tmp: Path) -> dict[str, str]:
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIDEORL_")}
    env.update(
        HOME=str(home), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONDONTWRITEBYTECODE="1"
    )
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    return env


def _run(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600
    )
    assert proc.returncode == 0, f"{' '.join(args)}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.slow
def test_the_gmpo_plugin_installs_passes_its_tests_and_trains_two_steps(
    tmp_path: Path, install_plugin: Any
) -> None:
    from videorl import demo

    before = _litter(GMPO)
    env = _env(install_plugin(GMPO, tmp_path), tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    listed = {
        p["name"]: p for p in json.loads(_run(env, work, "-m", "videorl.cli", "plugins", "--json").stdout)
    }
    entry = listed["videorl-algorithm-gmpo"]
    assert entry["status"] == "ok" and entry["version"] == "0.2.0"
    # core has GMPO built in as gmpo: the example registers its copy beside it, no collision
    assert entry["components"] == {"algorithm_presets": ["gmpo_example"], "policy_losses": ["gmpo_example"]}
    _run(env, work, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=-p videorl.testing",
         str(GMPO / "tests"))  # fmt: skip

    _run(env, work, "-m", "videorl.cli", "models", "tiny", "qwen2_5_vl", "model")
    train = demo.write_task(tmp_path / "data", 4, seed=0, split="train")
    side = 56  # the demo's clips: 56×56, 4 frames at 2 fps
    config = {
        "seed": 0,
        "output_dir": str(tmp_path / "run"),
        "model": {"path": str(work / "model"), "dtype": "float32"},
        "data": {
            "train_files": [str(train)], "source_mode": "realtime_only", "video_fps": 2.0,
            "video_max_frames": 4,
            "video_min_pixels": side * side, "video_max_pixels": side * side, "max_prompt_length": 512,
            "rollout_batch_size": 2, "thinking": False,
        },
        "rollout": {"engine": "hf", "n": 2, "max_response_length": 4},
        "actor": {"global_batch_size": 2, "gradient_checkpointing": False},
        "algorithm": {"preset": "gmpo_example", "loss_options": {"log_clip_high": 0.3}},
        "trainer": {"max_steps": 2, "save_every": 0, "val_every": 0, "loggers": ["jsonl"],
                    "progress_bar": False},
    }  # fmt: skip
    path = tmp_path / "train.yaml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    _run(env, work, "-m", "videorl.cli", "train", str(path))

    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(abs(m["actor/loss"]) < 10 and m["actor/grad_norm"] >= 0 for m in metrics)
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["algorithm"]
    assert (saved["preset"], saved["adv_estimator"], saved["policy_loss"]) == (
        "gmpo_example", "grpo", "gmpo_example",
    )  # fmt: skip
    assert saved["loss_options"] == {"log_clip_low": 0.4, "log_clip_high": 0.3}  # resolved, yours kept
    assert "videorl-algorithm-gmpo==0.2.0" in (tmp_path / "run" / "requirements.txt").read_text()
    assert _litter(GMPO) == before, "the test wrote into contrib/videorl-algorithm-gmpo"
