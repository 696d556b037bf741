"""``videorl train --ray`` on a local Ray runtime with 2 CPU actor workers (FSDP over gloo).

Both placements run two steps with the KL penalty on and must give the same metrics and weights as
a torchrun run of two processes with the same seed; a worker killed mid-run stops the controller
with an error naming it and the step, and ``--resume auto`` finishes the run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

COMPARED = (
    "actor/loss",
    "actor/kl",
    "actor/grad_norm",
    "actor/entropy",
    "reward/overall",
    "tokens/step",
    "val/accuracy/overall",
    "parity/logprob_diff/video",  # the first step's rollout.parity_check, on the actor workers
)
FRAME_BYTES = 4 * 56 * 56 * 3  # one demo sample's cached frames: 4 frames of 56 x 56 RGB, uint8


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The demo task (2 training prompts per step over 2 ranks, 4 responses each, KL on)."""
    from videorl import demo
    from videorl.plugins import load_plugins

    out = tmp_path_factory.mktemp("ray-task")
    model, train, val = demo.prepare(out, load_plugins(), family="qwen2_5_vl", seed=0, train=4, val=2)
    (out / "empty.yaml").write_text("seed: 5\n")
    overrides = [
        *demo.demo_overrides(out, model, train, val, steps=2, seed=5, engine="hf"),
        "data.rollout_batch_size=2",
        "actor.global_batch_size=2",
        "rollout.n=4",
        "trainer.save_every=1",
        "trainer.val_every=2",
        "trainer.progress_bar=false",
        "algorithm.use_kl_loss=true",
    ]
    return out, overrides


def _run(
    args: list[str], timeout: int = 420, home: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **({"HOME": str(home)} if home else {}), **(env or {})}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env)


def _metrics(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def _train(
    task: tuple[Path, list[str]],
    run: Path,
    *extra: str,
    torchrun: bool = False,
    home: Path | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """``videorl train`` of the task into ``run``, with ``extra`` overrides and flags (``--ray ...``), or
    under torchrun with two processes, ``env`` added to its environment; ``check``: it must succeed."""
    out, overrides = task
    launch = [*TORCHRUN, "-m", "videorl.cli"] if torchrun else ["-m", "videorl.cli"]
    done = _run(
        [*launch, "train", str(out / "empty.yaml"), *overrides, f"output_dir={run}", *extra],
        home=home,
        env=env,
    )
    assert not check or done.returncode == 0, done.stderr[-4000:]
    return done


def _assert_same_metrics(run: Path, reference: Path) -> list[dict[str, Any]]:
    """Both runs logged steps 1 and 2 with the same :data:`COMPARED` metrics; ``run``'s rows."""
    ours, theirs = _metrics(run), _metrics(reference)
    assert [m["step"] for m in ours] == [1, 2] == [m["step"] for m in theirs]
    for mine, ref in zip(ours, theirs):
        for key in COMPARED:
            assert (key in mine) == (key in ref), key
            if key in ref:
                assert mine[key] == pytest.approx(ref[key], rel=1e-5, abs=1e-7), (mine["step"], key)
    return ours


def _assert_same_weights(run: Path, reference: Path, step: int, rtol: float, atol: float) -> None:
    """The two runs' checkpoints of ``step`` hold the same weights (``rtol=atol=0``: bit for bit)."""
    import torch

    name = f"checkpoints/step_{step:06d}"
    final, expected = _model_state(run / name), _model_state(reference / name)
    assert final.keys() == expected.keys()
    for key, tensor in expected.items():
        torch.testing.assert_close(final[key], tensor, rtol=rtol, atol=atol, msg=key)


@pytest.fixture(scope="module")
def torchrun_run(task: tuple[Path, list[str]]) -> Path:
    run = task[0] / "torchrun"
    _train(task, run, torchrun=True)
    return run


@pytest.mark.parametrize("with_token", [True, False], ids=["token", "fresh-machine"])
def test_join_a_cluster_started_with_ray_start(
    task: tuple[Path, list[str]], torchrun_run: Path, tmp_path: Path, with_token: bool
) -> None:
    """The multi-node recipe on one machine whose home has never seen Ray (the suite's fresh HOME):
    ``ray get-auth-token --generate`` and ``ray start --head`` (token auth), then ``videorl train
    --ray-address`` twice: the controller presents this machine's token and frees its placement groups
    on exit, leaving the cluster running; a machine without the token is refused with an error saying
    what to copy. Plain ``ray start --head`` on a fresh machine starts a cluster without authentication,
    which the controller joins with a warning. (First in this file: ``ray start`` leaves a record of its
    cluster behind, which the local runs after it must not join.)"""
    import socket

    out = task[0]
    assert not (Path.home() / ".ray").exists()  # nothing left over from earlier runs
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray_cli = Path(sys.executable).with_name("ray")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    if with_token:
        subprocess.run(
            [str(ray_cli), "get-auth-token", "--generate"], check=True, capture_output=True, env=env
        )
    head = subprocess.Popen(
        [
            str(ray_cli),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--num-cpus=3",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    join = ["--ray-address", f"127.0.0.1:{port}", "ray.actor_workers=2", "ray.worker_start_timeout=120"]
    try:
        for attempt in range(
            2 if with_token else 1
        ):  # the second run needs the CPUs the first one's placement groups held
            run = out / f"ray-joined-{with_token}-{attempt}"
            done = _train(task, run, *join)
            assert ("without a token" in done.stderr) == (not with_token)
            assert [m["actor/loss"] for m in _metrics(run)] == pytest.approx(
                [m["actor/loss"] for m in _metrics(torchrun_run)], rel=1e-5
            )
        if with_token:
            stranger = tmp_path / "home-without-the-token"
            stranger.mkdir()
            # Ray retries a refused connection once a second for RAY_gcs_server_port_wait_time_s (or 20
            # times): a refusal is no less final after the first
            once = {"RAY_gcs_server_port_wait_time_s": "1"}
            done = _train(task, out / "ray-refused", *join, home=stranger, env=once, check=False)
            assert done.returncode != 0
            assert f"cannot join the Ray cluster at 127.0.0.1:{port}" in done.stderr, done.stderr[-4000:]
            assert (
                f"this machine has no Ray token (none in RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or {stranger}"
                "/.ray/auth_token)" in done.stderr
            )
            assert "Traceback" not in done.stderr
        assert head.poll() is None  # the cluster outlives the runs
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()


@pytest.mark.parametrize(
    ("placement", "extra", "roles"),
    [
        (
            "colocated",
            [],
            {
                "actor-0": ["actor", "rollout", "reference"],
                "actor-1": ["actor", "rollout", "reference"],
                "reward-0": ["reward"],
            },
        ),
        # one rollout and one reference worker serve both ranks' shares
        (
            "split",
            ["ray.rollout_workers=1", "ray.reference_workers=1"],
            {
                "actor-0": ["actor"],
                "actor-1": ["actor"],
                "rollout-0": ["rollout"],
                "reference-0": ["reference"],
                "reward-0": ["reward"],
            },
        ),
    ],
)
def test_ray_run_equals_torchrun_run(
    task: tuple[Path, list[str]],
    torchrun_run: Path,
    placement: str,
    extra: list[str],
    roles: dict[str, list[str]],
) -> None:
    run = task[0] / f"ray-{placement}"
    _train(task, run, "--ray", "ray.actor_workers=2", f"ray.placement={placement}", *extra)

    workers = json.loads((run / "ray-workers.json").read_text())
    assert {w["name"]: w["roles"] for w in workers} == roles
    assert len({w["pid"] for w in workers}) == len(workers) and os.getpid() not in {w["pid"] for w in workers}

    ours = _assert_same_metrics(run, torchrun_run)
    assert ours[1]["actor/kl"] > 0  # the reference was used (step 1's policy is the reference)
    assert "parity/logprob_diff/video" in ours[0] and "parity/logprob_diff/video" not in ours[1]
    _assert_same_weights(run, torchrun_run, 2, rtol=1e-5, atol=1e-6)

    # Sample ids, token ids and numbers cross between the processes, never frames: each sample's
    # messages (rollout request and reply, reward scoring, reference and update, 4 responses of at
    # most 8 tokens with their log-probs) stay far below one sample's frames.
    for m in ours:
        assert 0 < m["ray/sent_bytes_per_sample"] < FRAME_BYTES / 8
        assert 0 < m["ray/received_bytes_per_sample"] < FRAME_BYTES / 8
    assert ("ray/weight_sync_bytes" in ours[0]) == (placement == "split")


def test_remax_on_ray_equals_remax_under_torchrun(task: tuple[Path, list[str]]) -> None:
    """``algorithm.preset=remax`` with ``--ray``: the rollout workers generate each prompt's greedy
    baseline, the reward worker scores it, and the run equals a torchrun run of the same preset (whose
    baselines come from :func:`videorl.rollout.single_turn.rollout_groups`), metric for metric."""
    out = task[0]
    remax = ["algorithm.preset=remax", "trainer.log_completions=100"]
    _train(task, out / "remax-torchrun", *remax, torchrun=True)
    _train(task, out / "remax-ray", *remax, "--ray", "ray.actor_workers=2")
    _assert_same_metrics(out / "remax-ray", out / "remax-torchrun")
    # the step's responses, all logged: 2 prompts x 4 sampled ones, the greedy baselines not among them
    logged = [json.loads(line) for line in (out / "remax-ray" / "completions.jsonl").read_text().splitlines()]
    assert [row["step"] for row in logged] == [1] * 8 + [2] * 8


def test_killed_worker_is_named_and_the_run_resumes(task: tuple[Path, list[str]]) -> None:
    from videorl.runs.checkpoint import CheckpointManager

    out, overrides = task
    run = out / "ray-killed"
    steps = 4  # killed in step 1 or 2: at least two steps are left to resume
    command = [
        sys.executable,
        "-m",
        "videorl.cli",
        "train",
        str(out / "empty.yaml"),
        *overrides,
        f"output_dir={run}",
        f"trainer.max_steps={steps}",
        "trainer.keep_last=2",
        "trainer.val_every=0",
        "algorithm.use_kl_loss=false",
        "--ray",
        "ray.actor_workers=2",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 300
        while CheckpointManager(run / "checkpoints").latest() is None:  # step 1 is complete
            assert proc.poll() is None, proc.communicate()[1][-4000:]
            assert time.monotonic() < deadline, "the run wrote no checkpoint in 300 s"
            time.sleep(0.05)
        victim = next(w for w in json.loads((run / "ray-workers.json").read_text()) if w["name"] == "actor-1")
        os.kill(victim["pid"], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stderr[-4000:]
    found = re.search(
        r"worker actor-1 \(actor\+rollout; pid (\d+) on [^)]+\) died during ([a-z ]+) of step (\d+)", stderr
    )
    assert found, stderr[-4000:]
    assert int(found.group(1)) == victim["pid"]
    failed_step = int(found.group(3))  # 1 when the kill lands while step 1's checkpoint is acknowledged
    assert 1 <= failed_step < steps
    assert re.search(
        r"the last complete checkpoint is \S+/step_\d{6}: continue the run with --resume auto", stderr
    )

    done = _run([*command[1:], "--resume", "auto"])
    assert done.returncode == 0, done.stderr[-4000:]
    logged = [m["step"] for m in _metrics(run)]
    assert logged == list(range(1, steps + 1))  # every step once: none lost, none repeated

    # Nothing lost: the same as a run that was never interrupted (data positions, RNG, weights).
    whole = out / "ray-whole"
    done = _run([*[c for c in command[1:] if not c.startswith("output_dir=")], f"output_dir={whole}"])
    assert done.returncode == 0, done.stderr[-4000:]
    for resumed, uninterrupted in zip(_metrics(run), _metrics(whole), strict=True):
        assert resumed["actor/loss"] == pytest.approx(uninterrupted["actor/loss"], rel=1e-6, abs=1e-9)
        assert resumed["reward/overall"] == uninterrupted["reward/overall"]
    _assert_same_weights(run, whole, steps, rtol=0, atol=0)


def test_split_vllm_engine_gets_the_updated_weights_through_the_object_store(
    task: tuple[Path, list[str]],
) -> None:
    """The default engine in a rollout worker of its own: after each update actor-0 publishes the
    weights once and the worker's vLLM reloads them, so its log-probs stay those of the actor."""
    pytest.importorskip("vllm")
    run = task[0] / "ray-vllm"
    vllm = ["rollout.engine=vllm", "rollout.engine_options={max_model_len: 1024}"]
    _train(task, run, *vllm, "algorithm.use_kl_loss=false", "--ray", "ray.placement=split")
    rows = _metrics(run)
    assert [r["step"] for r in rows] == [1, 2]
    # lr 1e-3 moves the actor far more than this between the steps (tests/test_train_vllm.py measures it)
    assert rows[0]["rollout/logprob_diff"] < 1e-4 and rows[1]["rollout/logprob_diff"] < 1e-4
    assert rows[1]["ray/weight_sync_bytes"] > 0 and "val/accuracy/overall" in rows[1]


def test_a_torchrun_checkpoint_resumes_on_ray_and_continues_the_same(
    task: tuple[Path, list[str]], torchrun_run: Path, tmp_path: Path
) -> None:
    import shutil

    run = tmp_path / "from-torchrun"
    shutil.copytree(torchrun_run, run)
    _train(task, run, "--resume", str(run / "checkpoints" / "step_000001"), "--ray", "ray.actor_workers=2")
    assert [m["step"] for m in _metrics(run)] == [1, 2]
    assert _metrics(run)[1]["actor/loss"] == pytest.approx(_metrics(torchrun_run)[1]["actor/loss"], rel=1e-6)
    _assert_same_weights(run, torchrun_run, 2, rtol=1e-6, atol=1e-7)


def _model_state(checkpoint: Path) -> dict[str, Any]:
    """The whole model state dict of a (sharded) checkpoint directory, read in this process."""
    from videorl.runs.checkpoint import CheckpointManager

    return CheckpointManager(checkpoint.parent).load(checkpoint).model_state()


def test_tool_agent_on_sequence_parallel_ray_groups_trains_as_one_process(
    task: tuple[Path, list[str]],
) -> None:
    """Two features of the Ray launcher in one run (the suite's time: one Ray start, not two).

    ``actor.sequence_parallel_size=2`` on 2 colocated actor workers: one data group of two sequence
    ranks (Ulysses, padding-free rows), fed the group's episodes once: its first worker rolls out the
    step's 2 prompts with the seed of data group 0, which is one process's seed, so the run trains as
    one ``videorl train`` process on the same global batch.

    ``rollout.workflow=tool_agent``: the rolling-out worker runs the workflow where its frames are, and
    the episodes cross as ids, log-probs, the replies' requests and the calls
    (:mod:`videorl.cluster.episode_wire`). The random tiny model never writes a call itself, so every
    sample's offline trajectory (mix-policy, which takes the last slot of each group the policy got
    wrong) calls ``get_frames`` on its clip before answering: the worker replays it through the tool,
    the reward worker charges the call (``rewards.tool_call_cost``), and both actor workers rebuild the
    reply's 2-frame video from their own frame cache (each encodes its share of the frames).

    The same loss, KL, gradient norm, entropy and reward per step (they depend on every reply's tokens,
    media and loss mask), the same ``tool/*`` and mix-policy counters, and the same weights within 1e-5
    (float32); each step's episodes are logged once; each logged offline response is the answer after
    the call, charged for it; both workers record the group's data position and k = 2."""
    out, _ = task
    call = '<tool_call>{"name": "get_frames", "arguments": {"start": 0, "end": 1, "n": 2}}</tool_call>'
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    agent_train = out / "agent-train.jsonl"  # beside train.jsonl: the same clips and cache
    agent_train.write_text(
        "".join(json.dumps({**row, "offline_output": call + row["offline_output"]}) + "\n" for row in rows)
    )
    extra = [
        f"data.train_files=[{agent_train}]", "rollout.workflow=tool_agent", "rollout.tools=[get_frames]",
        "rollout.max_turns=2", "rollout.max_response_length=160", "data.max_prompt_length=2048",
        "rewards.tool_call_cost=0.1", "trainer.val_every=0", "trainer.log_completions=100",
        "actor.padding_free=true",
    ]  # fmt: skip
    sharded, single = out / "agent-ray-sequence-parallel", out / "agent-one-process"
    _train(task, single, *extra)
    _train(task, sharded, *extra, "--ray", "ray.actor_workers=2", "actor.sequence_parallel_size=2")

    workers = json.loads((sharded / "ray-workers.json").read_text())
    assert [w["name"] for w in workers] == ["actor-0", "actor-1", "reward-0"]
    ours, theirs = _metrics(sharded), _metrics(single)
    assert [m["step"] for m in ours] == [1, 2] == [m["step"] for m in theirs]
    assert ours[1]["actor/kl"] > 0  # the reference was used, as in one process
    for mine, ref in zip(ours, theirs):
        for key in ("actor/loss", "actor/kl", "actor/grad_norm", "actor/entropy", "reward/overall"):
            assert abs(mine[key] - ref[key]) <= 1e-5, (mine["step"], key, mine[key], ref[key])
        counters = sorted(k for k in ref if k.startswith(("tool/", "mix_policy/", "parts/")))
        assert counters == sorted(k for k in mine if k.startswith(("tool/", "mix_policy/", "parts/")))
        for key in counters:
            assert mine[key] == pytest.approx(ref[key], rel=1e-6), (mine["step"], key)
        assert mine["mix_policy/offline_replaced_groups"] > 0
    _assert_same_weights(sharded, single, 2, rtol=0, atol=1e-5)
    # the group's 2 prompts x 4 responses, logged once per step (not once per worker)
    logged = [json.loads(line) for line in (sharded / "completions.jsonl").read_text().splitlines()]
    assert [row["step"] for row in logged] == [1] * 8 + [2] * 8
    offline = [row for row in logged if row["offline"]]
    assert offline and all(row["parts"]["tool_call_cost"] == pytest.approx(-0.1) for row in offline)
    # the last turn, after the call and its reply: the answer
    assert all(row["response"].startswith("<answer>") and row["finish_reason"] == "stop" for row in offline)
    from videorl.runs.checkpoint import CheckpointManager

    written = CheckpointManager(sharded / "checkpoints").load(sharded / "checkpoints" / "step_000002")
    assert written.data_state["sequence_parallel_size"] == 2
    first, second = written.data_state["ranks"]
    assert first == second  # one data group: both workers hold its position
