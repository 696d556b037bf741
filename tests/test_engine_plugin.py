"""A third-party rollout engine (contrib/videorl-engine-recorder) as a stranger uses it: built into a
wheel, installed into a throwaway folder (the ``install_plugin`` fixture), listed by ``videorl
plugins``, its own contract test passed, and trained with through the CLI for 2 steps, in one process
and on Ray. The engine appends a line per call to the file of its ``log`` option, so the test sees that
the plugin's engine did generate (and, on Ray, received the weight refreshes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
RECORDER = ROOT / "contrib" / "videorl-engine-recorder"
#: the task's folder, its model, training and validation files, and the environment
Task = tuple[Path, tuple[Path, Path, Path], dict[str, str]]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, install_plugin: Any) -> Task:
    """The demo task and the environment of a machine with the plugin installed (empty HOME)."""
    from videorl import demo
    from videorl.plugins import load_plugins

    tmp = tmp_path_factory.mktemp("engine-plugin")
    site = install_plugin(RECORDER, tmp)
    (tmp / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIDEORL_")}
    env.update(HOME=str(tmp / "home"), OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    paths = demo.prepare(tmp, load_plugins(), family="qwen2_5_vl", seed=0, train=4, val=2)
    return tmp, paths, env


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, (
        f"{' '.join(args)}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    )
    return proc


def _train(task: Task, name: str, *extra: str) -> tuple[Path, list[dict[str, Any]]]:
    """``videorl train`` of the demo task with the recorder engine for 2 steps; the run and its calls."""
    from videorl import demo

    out, (model, train, val), env = task
    run, log = out / name, out / f"{name}-calls.jsonl"
    overrides = [
        *demo.demo_overrides(out, model, train, val, steps=2, seed=0,
                             engine="recorder"),
        f"output_dir={run}", f"rollout.engine_options={{log: {log}}}", "data.rollout_batch_size=2",
        "actor.global_batch_size=2", "rollout.n=2", "trainer.val_every=0", "trainer.save_every=0",
        "trainer.progress_bar=false",
    ]  # fmt: skip
    (out / "empty.yaml").write_text("seed: 0\n")
    _run(env, "-m", "videorl.cli", "train", str(out / "empty.yaml"), *overrides, *extra)
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2] and all(m["actor/grad_norm"] >= 0 for m in metrics)
    return run, [json.loads(line) for line in log.read_text().splitlines()]


def test_the_recorder_engine_installs_passes_its_contract_and_trains_in_one_process(
    installed: Task,
) -> None:
    env = installed[2]
    listed = {p["name"]: p for p in json.loads(_run(env, "-m", "videorl.cli", "plugins", "--json").stdout)}
    entry = listed["videorl-engine-recorder"]
    assert entry["status"] == "ok" and entry["components"] == {"rollout_engines": ["recorder"]}
    _run(env, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=-p videorl.testing",
         str(RECORDER / "tests"))  # fmt: skip

    _, calls = _train(installed, "one-process")
    # one process: the engine generates with the actor's own module, which no refresh has to reach;
    # each step generates its 2 prompts x 2 responses (the parity check of step 1 adds calls)
    generated = [c for c in calls if c["call"] == "generate"]
    assert len(generated) >= 2 and {c["n"] for c in generated} >= {2}
    assert not [c for c in calls if c["call"] == "update_weights"]


def test_the_recorder_engine_trains_on_ray(installed: Task) -> None:
    run, calls = _train(installed, "ray", "--ray", "ray.actor_workers=2")
    listed = json.loads((run / "ray-workers.json").read_text())
    workers = {w["pid"] for w in listed if "rollout" in w["roles"]}
    # each of the 2 actor workers hosts a recorder engine with a copy of its own, refreshed after each
    # update: it generated in that worker's process and received the weights
    assert len(workers) == 2 and os.getpid() not in workers
    assert {c["pid"] for c in calls if c["call"] == "generate"} == workers
    assert {c["pid"] for c in calls if c["call"] == "update_weights"} == workers
