"""``videorl train`` with the vLLM engine (CPU build): a few steps, and the engine's log-probs after the
weight refresh agree with the actor's.

Runs ``videorl train`` in a subprocess: vLLM changes process-wide settings (threads, RNG) that must not
leak into pytest. In one process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) vLLM starts in seconds.
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

pytest.importorskip("vllm")


def _train_args(task: Path, prepared: tuple[Path, Path, Path], run: Path, steps: int) -> list[str]:
    """``videorl train`` arguments on the demo task ``demo.prepare`` wrote to ``task`` (``prepared``:
    its model, training and validation data), two prompts (``rollout.n=4``) per step, with the fp32
    vLLM engine in this process (run it with the ``vllm_env`` variables), writing to ``run``."""
    from videorl import demo

    model, train, val = prepared
    config = task / "train.yaml"
    config.write_text("rollout:\n  engine: vllm\nmodel:\n  dtype: float32\n")
    overrides = [
        o
        for o in demo.demo_overrides(task, model, train, val, steps=steps, seed=3, engine="vllm")
        if not o.startswith(("rollout.engine=", "model.dtype="))
    ]
    overrides += [
        f"output_dir={run}",
        "data.rollout_batch_size=2",
        "actor.global_batch_size=2",
        "rollout.n=4",
        "trainer.progress_bar=false",
        "rollout.engine_options={max_model_len: 1024}",
    ]
    return ["train", str(config), *overrides]


# ``python -c _TRAIN_RUNS JOBS_JSON``: ``videorl train ARGS`` for each ``[ARGS, RECORD]`` in turn, in this
# one process (the imports are paid once), a job with a RECORD path under vllm_probe.force_first_call;
# prints, as JSON on its last line, each run's exit code and the refresh directories it made.
_TRAIN_RUNS = """
import json, sys, tempfile

from videorl.cli import main
from vllm_probe import force_first_call

made = []  # the refresh directories these runs make (other tests' runs may share /dev/shm meanwhile)
mkdtemp = tempfile.mkdtemp
tempfile.mkdtemp = lambda *a, **k: made.append(mkdtemp(*a, **k)) or made[-1]
codes = []
for args, record in json.loads(sys.argv[1]):
    undo = force_first_call(record) if record else None
    try:
        main(args)
    except SystemExit as exc:
        codes.append(exc.code or 0)
    finally:
        if undo is not None:
            undo()
print(json.dumps([codes, [d for d in made if "videorl-weights-" in d]]))
"""


def _lora_args(root: Path, lora_overrides: Callable[..., list[str]]) -> list[str]:
    """``videorl train`` arguments of tests/test_lora.py's LoRA run with the vLLM engine, on four demo
    training clips taken in order: step 2 sees other videos than step 1."""
    from videorl import demo
    from videorl.plugins import load_plugins

    task = root / "lora-task"
    model, train, val = demo.prepare(task, load_plugins(), family="qwen2_5_vl", seed=0, train=4, val=2)
    config = task / "train.yaml"
    config.write_text("rollout:\n  engine: vllm\n")
    overrides = lora_overrides(
        task, model, train, val, root / "lora",
        "rollout.engine_options={max_model_len: 1024}", "data.shuffle=false", engine="vllm",
    )  # fmt: skip
    return ["train", str(config), *overrides]


#: the tool_agent run (one step): get_frames offered, two turns, its first turn scripted to call the tool
_AGENT = [
    "rollout.workflow=tool_agent",
    "rollout.tools=[get_frames]",
    "rollout.enable_mix_policy=false",
    "rollout.max_turns=2",
    "rollout.max_response_length=256",
    "data.max_prompt_length=2048",  # the tool's description in the system turn
    "rollout.engine_options={max_model_len: 4096}",
    "trainer.val_every=100",
    "trainer.save_every=100",
]


@pytest.fixture(scope="module")
def vllm_runs(
    tmp_path_factory: pytest.TempPathFactory,
    vllm_env: dict[str, str],
    lora_overrides: Callable[..., list[str]],
) -> dict[str, Path]:
    """The ``videorl train`` runs with the vLLM engine, one subprocess for all: ``memory`` (three
    steps, the default in-memory refresh, a checkpoint each step, greedy validation at step 2),
    ``folder`` (the same through the model folder), ``lora`` (:func:`_lora_args`) and ``agent`` (one
    tool_agent step, :data:`_AGENT`, recorded in ``agent.jsonl`` beside it). Asserts each
    ended with 0, and that none left its refresh directory in /dev/shm."""
    from videorl import demo
    from videorl.plugins import load_plugins

    root = tmp_path_factory.mktemp("train-vllm")
    task = root / "task"
    prepared = demo.prepare(task, load_plugins(), family="qwen2_5_vl", seed=0, train=2, val=2)
    runs = {"memory": root / "memory", "folder": root / "folder", "lora": root / "lora"}
    extra = {
        "memory": ["trainer.save_every=1", "trainer.keep_last=0", "trainer.val_every=2"],
        "folder": ["rollout.weight_sync=folder", "trainer.val_every=100"],
    }
    jobs: list[tuple[list[str], str | None]] = [
        ([*_train_args(task, prepared, runs[name], steps=3), *args], None) for name, args in extra.items()
    ]
    jobs.append((_lora_args(root, lora_overrides), None))
    runs["agent"] = root / "agent"
    jobs.append(([*_train_args(task, prepared, runs["agent"], steps=1), *_AGENT], str(root / "agent.jsonl")))
    done = subprocess.run(
        [sys.executable, "-c", _TRAIN_RUNS, json.dumps(jobs)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, **vllm_env},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    codes, made = json.loads(done.stdout.strip().splitlines()[-1])
    assert codes == [0, 0, 0, 0], done.stderr[-4000:]
    assert made and not [d for d in made if Path(d).exists()]  # the refresh directories were removed
    return runs


@pytest.mark.slow
def test_vllm_engine_trains_and_its_logprobs_match_the_actor_after_the_refresh(
    vllm_runs: dict[str, Path], tmp_path: Path
) -> None:
    """Three steps with the default in-memory refresh. Two training clips, two prompts a step: every
    step repeats the videos of the step before, which the engine re-encodes after each refresh (vLLM's
    scheduler once thought their encoder outputs still cached after the workers had dropped them:
    "Encoder cache miss" in step 2 or 3)."""
    from videorl.config import load_config
    from videorl.plugins import load_plugins
    from videorl.runs.checkpoint import CheckpointManager
    from videorl.runs.history import read_metrics
    from videorl.train.compose import build_training

    run = vllm_runs["memory"]
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[0]["rollout/logprob_diff"] < 1e-4  # vLLM fp32 and the actor before any update
    # ... and after each refresh from the updated actor
    assert all(r["rollout/logprob_diff"] < 1e-4 for r in rows[1:]), [r["rollout/logprob_diff"] for r in rows]
    assert "val/accuracy/overall" in rows[1]  # greedy validation through vLLM

    # The update of step 1 moved the actor's log-probs far more than that: an engine left with the
    # initial weights would have shown it in step 2.
    hf = [f"output_dir={tmp_path / 'check'}", "rollout.engine=hf", "rollout.engine_options={}"]
    check = build_training(load_config(run / "config.yaml", hf), load_plugins())
    before = _offline_answer_logprobs(check)
    step1 = CheckpointManager(run / "checkpoints").load(run / "checkpoints" / "step_000001")
    check.actor.model.load_state_dict(step1.model_state())
    moved = (before - _offline_answer_logprobs(check)).abs().mean()
    assert moved > 100 * 1e-4, float(moved)


@pytest.mark.slow
def test_a_video_seen_again_after_the_folder_refresh_is_encoded_with_the_new_weights(
    vllm_runs: dict[str, Path],
) -> None:
    """As the test above, through the model folder (the run shares the test above's subprocess)."""
    from videorl.runs.history import read_metrics

    rows = read_metrics(vllm_runs["folder"] / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["rollout/logprob_diff"] < 1e-4 for r in rows), [r["rollout/logprob_diff"] for r in rows]


@pytest.mark.slow
def test_vllm_gets_the_merged_weights_and_its_logprobs_match_the_actor(vllm_runs: dict[str, Path]) -> None:
    """LoRA (tests/test_lora.py): the CPU vLLM build, refreshed after each update with the adapters
    merged into the base weights: its log-probs stay within 1e-4 of the actor's (adapters apart) after
    the refresh. Four training clips, two per step: step 2 sees other videos than step 1."""
    from videorl.runs.history import read_metrics

    rows = read_metrics(vllm_runs["lora"] / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["rollout/logprob_diff"] < 1e-4  # base weights: the adapters start at B = 0
    assert rows[1]["rollout/logprob_diff"] < 1e-4  # after the refresh with the merged step-1 adapters
    assert rows[1]["actor/kl"] > 0  # ... which moved the policy away from the base


@pytest.mark.slow
def test_vllm_continues_tool_agent_episodes_with_the_reply_video_and_its_logprobs(
    vllm_runs: dict[str, Path],
) -> None:
    """``rollout.workflow=tool_agent`` on vLLM, one step (the run shares the subprocess above): the first
    turn is scripted to call get_frames (a random tiny model never writes a call;
    ``vllm_probe.force_first_call``), vLLM generates the second turn from the prompt, the call and the
    reply's 2-frame video segment. Every episode has its reply masked (NaN log-probs), the engine's
    log-prob of every policy token, within 1e-4 of the actor's teacher-forced forward over the whole
    episode; and vLLM encoded only the replies' videos in the second turn, the prompts' videos once
    (its encoder cache and prefix cache keep them)."""
    from videorl.runs.history import read_metrics

    (row,) = read_metrics(vllm_runs["agent"] / "metrics.jsonl")
    assert row["tool/calls/get_frames"] == 8 and row["tool/turns_per_episode"] == 2.0  # 2 prompts × n=4
    assert row["rollout/logprob_diff"] < 1e-4
    (record,) = [json.loads(line) for line in (vllm_runs["agent"].parent / "agent.jsonl").open()]
    for episode in record["episodes"]:
        assert episode["trained"] == [True, False, True]
        assert episode["media"] == [[], ["video:frames=1,3"], []]  # 0.5 s and 1.5 s of the 2 fps clip
        assert episode["policy_finite"] and episode["replies_nan"]
        assert episode["max_gap"] < 1e-4, record["episodes"]
    first, second = record["calls"]
    assert first["encoded"] == [[2, 4, 4]] * 2  # each prompt's 4 frames, once for its 4 requests
    assert second["encoded"] == [[1, 4, 4]] * 2  # the replies' 2 frames only: no prompt video again
    assert min(second["cached_tokens"]) > 0  # the prefix cache held the earlier turn's KV


def _offline_answer_logprobs(training: Any) -> Any:
    """Per-token log-probs of the validation prompts' offline answers under the actor."""
    import torch

    from videorl.model_inputs import response_logprobs

    backend = training.actor.backend
    prompts = training.validation
    answers = [
        backend.processor.tokenizer.encode(p.sample.offline_output, add_special_tokens=False) for p in prompts
    ]
    inputs = backend.collate([p.require_encoded() for p in prompts], answers)
    with torch.no_grad():
        logits = training.actor.model(**inputs.model_kwargs()).logits
    return response_logprobs(logits, inputs, forbidden=backend.forbidden_token_ids())[
        inputs.response_mask.bool()
    ]


# The async engine's weight refresh, in a subprocess: ``python -c _ASYNC_REFRESH BASE OTHER OUT_JSON``.
# It generates from a video and a text prompt with BASE's weights, refreshes to OTHER's in memory (the
# engine runs in processes of its own: the buckets travel as bytes), generates again, refreshes back to
# BASE's through the model folder (the video prompt then needs the processor from that folder) and
# generates once more; it writes the largest difference of the engine's log-probs from the fp32
# teacher-forced forward of each model. Before the first refresh it also runs two tool_agent episodes
# (vllm_probe.agent_episodes: a scripted call, then the engine's turn after the reply's video).
_ASYNC_REFRESH = """
import json, sys
from pathlib import Path

import torch

from videorl.api import backend_for_model
from videorl.plugins import load_plugins
from videorl.rollout.vllm_async import AsyncVLLMEngine
from vllm_probe import PARAMS, agent_episodes, max_logprob_diff, probe_prompts

base_dir, other_dir, out = sys.argv[1:4]
registry = load_plugins().model_backends
backend = backend_for_model(base_dir, registry)
prompts = probe_prompts(backend, torch.Generator().manual_seed(0))


def max_diff(groups, model):
    return max_logprob_diff(backend, prompts, groups, model)


base = backend.load_model(dtype=torch.float32)
other = backend_for_model(other_dir, registry).load_model(dtype=torch.float32)
engine = AsyncVLLMEngine(backend, base_dir, dtype="float32", max_model_len=1024, weight_bucket_mb=1)
try:
    before = engine.generate(prompts, PARAMS)
    agent = agent_episodes(engine, backend, base)  # a tool_agent turn after a reply's video
    engine.update_weights(other.state_dict())
    memory_left_no_folder = engine._weights.root is None
    after = engine.generate(prompts, PARAMS)
    engine.weight_sync = "folder"  # the same engine, refreshed back the other way
    engine.update_weights(base.state_dict())
    folder = engine._weights.root / "model"
    files = sorted(p.name for p in folder.iterdir())
    back = engine.generate(prompts, PARAMS)
finally:
    engine.close()
result = {
    "before_vs_base": max_diff(before, base)[0],
    "after_vs_other": max_diff(after, other)[0],
    "after_vs_base": max_diff(after, base)[0],
    "back_vs_base": max_diff(back, base)[0],
    "memory_left_no_folder": memory_left_no_folder,
    "completions": [len(g) for g in before + after + back],
    "tokens": max_diff(after, other)[1],
    "refresh_dir_files": files,
    "removed": not folder.exists(),
    "agent": agent,
}
Path(out).write_text(json.dumps(result))
"""


@pytest.mark.slow
def test_async_engine_update_weights_gives_the_new_weights_logprobs(
    tmp_path: Path, tiny_model_dir: Any, vllm_env: dict[str, str]
) -> None:
    from videorl_models.tiny import build_tiny

    base = tiny_model_dir("qwen2_5_vl")
    other = build_tiny("qwen2_5_vl", tmp_path / "other", seed=1)  # same architecture, other random weights
    out = tmp_path / "result.json"
    # the async engine runs vLLM in processes of its own
    env = {**os.environ, **{k: v for k, v in vllm_env.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}}
    done = subprocess.run(
        [sys.executable, "-c", _ASYNC_REFRESH, str(base), str(other), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["completions"] == [2] * 6  # two prompts, n=2, before and after each refresh
    assert result["tokens"] >= 4  # responses end at EOS or after 8 tokens
    assert result["before_vs_base"] < 1e-4  # fp32 engine and HF forward agree before the refresh
    assert result["after_vs_other"] < 1e-4  # ... and after the in-memory one, with the new weights
    assert result["after_vs_base"] > 100 * 1e-4, result  # the old weights would have shown
    assert result["memory_left_no_folder"]  # 1 MiB buckets, no model folder
    assert result["back_vs_base"] < 1e-4  # the folder refresh, back to the first weights
    # the refresh folder was a whole model folder (vLLM reads config and processor from it), since removed
    assert {"config.json", "model.safetensors", "tokenizer.json", "processor_config.json"} <= set(
        result["refresh_dir_files"]
    ), result["refresh_dir_files"]
    assert result["removed"]
    # tool_agent on the async engine: the second turn, sampled after the call and the reply's 2-frame
    # video, has the engine's log-prob of every token, the actor's within 1e-4; the reply is masked
    assert len(result["agent"]) == 2  # n=2
    for episode in result["agent"]:
        assert episode["trained"] == [True, False, True] and episode["tokens"][2] > 0
        assert episode["media"] == [[], ["video:frames=1,3"], []]  # 0.5 s and 1.5 s of the 2 fps clip
        assert episode["policy_finite"] and episode["replies_nan"]
        assert episode["max_gap"] < 1e-4, result["agent"]


_OPTIONS = """
import json, sys
import vllm
from videorl.backend import backend_for_model
from videorl.errors import ConfigError
from videorl.plugins import load_plugins
from videorl.rollout.vllm import VLLMEngine

seen = {}

class LLM:  # records what the engine asks vLLM for, starts nothing
    def __init__(self, **options):
        seen.clear()
        seen.update(options)

    def collective_rpc(self, *args, **kwargs):
        raise AssertionError("no call expected")

vllm.LLM = LLM
backend = backend_for_model(sys.argv[1], load_plugins().model_backends)
VLLMEngine(backend, max_model_len=1000, enable_prefix_caching=True, max_num_seqs=7,
           distributed_executor_backend="uni")
out = {"memory": dict(seen)}
VLLMEngine(backend, weight_sync="folder")
out["folder"] = dict(seen)
from videorl.rollout.factory import make_engine  # the spec's values, rollout.engine_options winning
make_engine(load_plugins(), "vllm", backend, model_path=sys.argv[1], dtype="float32", seed=3,
            max_model_len=1000, options={"max_model_len": 64, "max_num_seqs": 7})
out["spec"] = {k: seen[k] for k in ("dtype", "seed", "max_model_len", "max_num_seqs")}
errors = []
for bad in ({"max_num_seq": 4}, {"weight_bucket": 8}, {"worker_extension_cls": "my.Ext"},
            {"weight_sync": "shm"}, {"weight_bucket_mb": 0}, {"frobnicate": 1}, {"enable_sleep_mode": True}):
    try:
        VLLMEngine(backend, **bad)
        errors.append(None)
    except ConfigError as e:
        errors.append(str(e))
out["errors"] = errors
print(json.dumps(out))
"""


@pytest.mark.slow
def test_engine_options_reach_vllm_and_defaults_follow_the_platform(tiny_model_dir: Any) -> None:
    from videorl.rollout.vllm_weights import RECEIVER

    done = subprocess.run(
        [sys.executable, "-c", _OPTIONS, str(tiny_model_dir("qwen2_5_vl"))],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    options = result["memory"]
    assert options["max_model_len"] == 1000
    assert (
        options["enable_prefix_caching"] is True and options["max_num_seqs"] == 7
    )  # passed through, no whitelist
    assert options["distributed_executor_backend"] == "uni"
    assert options["enforce_eager"] is True  # the CPU platform: eager (CUDA graphs on GPUs)
    assert "enable_sleep_mode" not in options  # vLLM refuses sleep mode on CPU; on by default where it has it
    assert "gpu_memory_utilization" not in options
    assert options["worker_extension_cls"] == RECEIVER  # the in-memory refresh's worker methods
    assert "worker_extension_cls" not in result["folder"]
    assert result["spec"] == {"dtype": "float32", "seed": 3, "max_model_len": 64, "max_num_seqs": 7}

    typo, own_typo, conflict, mode, bucket, unknown, asleep = result["errors"]
    assert typo.startswith("rollout.engine_options.max_num_seq: vLLM's engine takes no option")
    assert "did you mean max_num_seqs" in typo and "EngineArgs" in typo
    assert "did you mean weight_bucket_mb" in own_typo  # the engine's own options are suggested too
    assert (
        conflict.startswith("rollout.engine_options.worker_extension_cls:")
        and "weight_sync=folder" in conflict
    )
    assert mode == "rollout.weight_sync must be memory or folder, got 'shm'"
    assert bucket == "rollout.weight_bucket_mb must be >= 1, got 0"
    assert "did you mean" not in unknown and "frobnicate" in unknown
    # vLLM's sleep mode (the engine freeing its memory during the update) needs a GPU: on this CPU
    # platform it is refused, naming the option, before any engine starts
    assert asleep.startswith(
        "rollout.engine_options.enable_sleep_mode: vLLM's sleep mode needs a CUDA, ROCm or XPU device"
    ), asleep
