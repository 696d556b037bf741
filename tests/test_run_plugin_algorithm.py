"""An algorithm from a run plugin (a ``.py`` file named in the config's ``plugins:``) trains in one
process and on Ray, and the policy loss that runs is the plugin's, in the process that updates.

Before the reshape the step looked its algorithm up through a module global that only ``videorl
train``'s own process set, so a Ray actor worker, which loads the run's plugin modules itself, built
the algorithm from the installed plugins alone and failed on the plugin's loss name. Now the
composition root builds the algorithm once per process from that process's plugins and hands it in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PLUGIN = '''
"""A plain policy gradient that records which process computed it."""

import os
from dataclasses import dataclass, field

import torch

from videorl.api import PolicyLoss, hookimpl


@dataclass
class MarkedLoss:
    marker: str = field(default="", metadata={"help": "file that records the pid of every call"})

    def loss(self, log_probs, old_log_probs, advantages, mask, scale):
        with open(self.marker, "a") as f:
            f.write(f"{os.getpid()}\\n")
        adv = advantages if advantages.dim() == 2 else advantages.unsqueeze(-1)
        ratio = torch.exp(log_probs - old_log_probs)
        loss = -(ratio * adv * mask).sum() / scale.tokens
        kl = ((old_log_probs - log_probs) * mask).sum().detach() / mask.sum().clamp(min=1)
        return PolicyLoss(loss, torch.zeros(()), kl)


@hookimpl
def register_policy_losses(register):
    register("marked_pg", MarkedLoss, description="policy gradient that records its calls")
'''


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    from videorl import demo
    from videorl.plugins import load_plugins

    out = tmp_path_factory.mktemp("run-plugin")
    model, train, val = demo.prepare(out, load_plugins(), family="qwen2_5_vl", seed=0, train=4, val=2)
    (out / "marked_loss.py").write_text(PLUGIN)
    (out / "run.yaml").write_text("plugins: [marked_loss.py]\n")
    overrides = [
        *demo.demo_overrides(out, model, train, val, steps=2, seed=3, engine="hf"),
        "data.rollout_batch_size=2",
        "actor.global_batch_size=2",
        "rollout.n=2",
        "trainer.val_every=0",
        "trainer.progress_bar=false",
        "algorithm.policy_loss=marked_pg",
    ]
    return out, overrides


@pytest.mark.slow
@pytest.mark.parametrize("ray", [False, True], ids=["local", "ray"])
def test_a_run_plugin_loss_trains_and_runs_where_the_update_runs(
    task: tuple[Path, list[str]], ray: bool
) -> None:
    out, overrides = task
    run, marker = out / f"run-{ray}", out / f"calls-{ray}.txt"
    command = [
        sys.executable, "-m", "videorl.cli", "train", str(out / "run.yaml"), *overrides,
        f"output_dir={run}", f"algorithm.loss_options={{marker: {marker}}}",
        *(["--ray", "ray.actor_workers=1"] if ray else []),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=out)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    pids = {int(line) for line in marker.read_text().split()}
    assert len(marker.read_text().split()) >= 2  # one call per micro-batch, at least one per step
    if ray:  # computed by the actor worker, a process of its own
        workers = json.loads((run / "ray-workers.json").read_text())
        assert pids == {w["pid"] for w in workers if w["name"] == "actor-0"}
    assert "marked_pg" in (run / "config.yaml").read_text()
