"""GRPO training end to end on a tiny model: a real run, its files, resume after SIGKILL, bad configs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from videorl import demo
from videorl.api import hookimpl
from videorl.config import load_config
from videorl.errors import ConfigError, DataError
from videorl.generation import EngineCapabilities
from videorl.plugins import load_plugins
from videorl.runs.history import read_metrics
from videorl.train.compose import build_training


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    out = tmp_path_factory.mktemp("task")
    model, train, val = demo.prepare(out, load_plugins(), family="qwen2_5_vl", seed=0, train=8, val=4)
    return out, model, train, val


def _overrides(task: tuple[Path, Path, Path, Path], run: Path, steps: int, *extra: str) -> list[str]:
    out, model, train, val = task
    base = demo.demo_overrides(out, model, train, val, steps=steps, seed=3, engine="hf")
    return [
        *base,
        f"output_dir={run}",
        "data.rollout_batch_size=2",
        "actor.global_batch_size=2",
        "rollout.n=4",
        "trainer.progress_bar=false",
        "trainer.val_every=2",
        *extra,
    ]


def test_two_steps_write_metrics_checkpoints_and_metadata(task: Any, tmp_path: Path) -> None:
    run = tmp_path / "run"
    config = load_config(None, _overrides(task, run, 2, "trainer.save_every=1"))
    training = build_training(config, load_plugins())
    seen: list[int] = []
    assert training.run(on_step=lambda step, m: seen.append(step)) == 2
    assert seen == [1, 2]
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for key in (
        "reward/overall",
        "accuracy/overall",
        "accuracy/multiple_choice",
        "response_length/mean",
        "actor/loss",
        "actor/clip_fraction",
        "actor/entropy",
        "actor/grad_norm",
        "time/rollout",
        "time/actor",
        "time/data",
        "mix_policy/offline_replaced_groups",
        "offline/accuracy",
    ):
        assert key in rows[0], key
    assert rows[0]["mix_policy/offline_replaced_groups"] == 2.0  # both groups got their offline answer
    assert rows[0]["offline/accuracy"] == 1.0  # "<answer>X</answer>" is the right answer
    assert "val/accuracy/overall" in rows[1]
    assert rows[0]["rollout/logprob_diff"] < 1e-5  # the engine samples from the actor itself (fp32)
    assert sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.startswith("step_")) == [
        "step_000001",
        "step_000002",
    ]
    assert (run / "config.yaml").is_file() and "videorl==0.1.0" in (run / "requirements.txt").read_text()
    assert load_config(run / "config.yaml").rollout.n == 4  # the saved config loads back


def test_parameters_change_and_the_offline_answer_gets_likelier(task: Any, tmp_path: Path) -> None:
    import torch

    config = load_config(None, _overrides(task, tmp_path / "run", 3))  # the demo's learning rate
    training = build_training(config, load_plugins())
    before = {k: v.clone() for k, v in training.actor.model.state_dict().items()}
    prompt = training.validation[0]
    offline = prompt.sample.offline_output
    backend = training.actor.backend
    ids = backend.processor.tokenizer.encode(offline, add_special_tokens=False)

    def answer_logprob() -> float:
        from videorl.model_inputs import response_logprobs

        inputs = backend.collate([prompt.encoded], [ids])
        with torch.no_grad():
            logits = training.actor.model(**inputs.model_kwargs()).logits
        return float(response_logprobs(logits, inputs, forbidden=backend.forbidden_token_ids()).sum())

    start = answer_logprob()
    training.run()
    changed = [k for k, v in training.actor.model.state_dict().items() if not torch.equal(v, before[k])]
    assert changed and answer_logprob() > start + 1.0


def test_unknown_key_and_bad_dataset_rows_are_named(task: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"rollout\.temperatur.*Did you mean .rollout\.temperature"):
        load_config(None, _overrides(task, tmp_path / "r", 1, "rollout.temperatur=0.5"))
    out, _, train, _ = task
    bad = tmp_path / "bad.jsonl"
    lines = train.read_text().splitlines()
    row = json.loads(lines[1])
    row["problem_type"] = "colour naming"
    bad.write_text("\n".join([lines[0], json.dumps(row)]) + "\n")
    (tmp_path / "clips").symlink_to(out / "clips")
    config = load_config(None, _overrides(task, tmp_path / "r", 1, f"data.train_files=[{bad}]"))
    with pytest.raises(DataError, match=r"bad\.jsonl:2.*'colour naming'.*multiple_choice"):
        build_training(config, load_plugins())


def _typed_rows(
    task: tuple[Path, Path, Path, Path],
    out: Path,
    types: list[str],
    *,
    first: int = 0,
    name: str = "typed.jsonl",
    **fields: Any,
) -> Path:
    """The task's rows from ``first`` on with ``types`` as their problem types (and ``fields``), video
    paths absolute, in ``out/name``."""
    _, _, train, _ = task
    rows = [json.loads(line) for line in train.read_text().splitlines()[first : first + len(types)]]
    for row, kind in zip(rows, types):
        row.update(problem_type=kind, videos=[str(train.parent / v) for v in row["videos"]], **fields)
        row.pop("offline_output", None)
    path = out / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_routed_type_trains_with_its_rewards_templates_and_metrics_use_one_spelling(
    task: Any, tmp_path: Path
) -> None:
    """rewards.routes {counting: numerical} (docs/rewards.md): 'counting' has no template of its own and
    takes numerical's; 'Multiple Choice' and 'mc' are one series; a few completions are logged."""
    run = tmp_path / "run"
    counting = _typed_rows(
        task, tmp_path, ["counting", "Counting"], problem="How many squares?", answer="1", options=None
    )
    mc = _typed_rows(task, tmp_path, ["Multiple Choice", "mc"], first=2, name="mc.jsonl")
    config = load_config(
        None,
        _overrides(
            task,
            run,
            2,
            f"data.train_files=[{counting},{mc}]",
            "data.prompt_template=null",
            "rewards.routes={counting: numerical}",
            "rollout.enable_mix_policy=false",
            "trainer.val_every=0",
            "trainer.log_completions=3",
            "data.rollout_batch_size=4",
            "actor.global_batch_size=4",
            "rollout.n=2",
            "data.shuffle=false",
        ),
    )
    training = build_training(config, load_plugins())
    text = training.encode.text(training.data.samples[0])
    assert text.startswith("How many squares?") and "only the number" in text  # numerical's template
    assert training.run() == 2
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    per_type = {k for k in rows[0] if k.startswith("reward/")}
    assert per_type == {"reward/overall", "reward/counting", "reward/multiple_choice"}  # one series per type
    assert {"parts/counting/accuracy", "parts/counting/format", "parts/multiple_choice/format"} <= set(
        rows[0]
    )
    logged = [json.loads(line) for line in (run / "completions.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == [1, 1, 1, 2, 2, 2]
    assert len({r["sample_id"] for r in logged[:3]}) == 3  # one response per prompt first
    assert {"response", "reward", "parts", "problem_type", "ground_truth"} <= set(logged[0])


class _NoTemplatePlugin:
    """A reward plugin that registers a reward and no prompt template."""

    @staticmethod
    @hookimpl
    def register_rewards(register: Any) -> None:
        register("shade", lambda inp: 1.0)


def test_a_type_without_a_template_is_an_error_before_the_model_loads(
    task: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from videorl.train import compose

    def no_model(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the model was loaded before the templates were checked")

    monkeypatch.setattr(compose, "make_actor", no_model)
    data = _typed_rows(task, tmp_path, ["multiple choice", "tint"])
    config = load_config(
        None,
        _overrides(
            task,
            tmp_path / "r",
            1,
            f"data.train_files=[{data}]",
            "data.prompt_template=null",
            "rewards.routes={tint: shade}",
        ),
    )
    plugins = load_plugins(extra=[_NoTemplatePlugin])
    with pytest.raises(
        DataError,
        match=r"typed\.jsonl:2: sample 'train-0001' of problem_type 'tint' \(routed to "
        r"'shade' by rewards\.routes\): no non-thinking prompt template .*tried tint@qwen2_5_vl, tint, "
        r"shade@qwen2_5_vl, shade\)"
        r".*Registered templates: .*multiple_choice",
    ):
        build_training(config, plugins)
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


def test_a_ground_truth_of_the_wrong_shape_is_named_when_the_data_loads(task: Any, tmp_path: Path) -> None:
    data = _typed_rows(task, tmp_path, ["multiple choice", "multiple choice"])
    rows = data.read_text().splitlines()
    bad = json.loads(rows[1])
    bad["answer"] = {"letter": "A"}
    data.write_text(rows[0] + "\n" + json.dumps(bad) + "\n")
    config = load_config(None, _overrides(task, tmp_path / "r", 1, f"data.train_files=[{data}]"))
    with pytest.raises(
        DataError,
        match=r"typed\.jsonl:2: sample 'train-0001': the ground truth .* \(an object\) is "
        r"not a valid multiple_choice answer; expected an option letter",
    ):
        build_training(config, load_plugins())


def test_preprocessed_only_requires_every_video_in_the_cache(task: Any, tmp_path: Path) -> None:
    config = load_config(None, _overrides(task, tmp_path / "r", 1, f"data.cache_dir={tmp_path / 'empty'}"))
    with pytest.raises(DataError, match=r"train\.jsonl:1"):
        build_training(config, load_plugins())


def test_a_run_refuses_to_overwrite_checkpoints_without_resume(task: Any, tmp_path: Path) -> None:
    run = tmp_path / "run"
    build_training(load_config(None, _overrides(task, run, 1)), load_plugins()).run()
    with pytest.raises(ConfigError, match="resume=auto"):
        build_training(load_config(None, _overrides(task, run, 2)), load_plugins())


def test_a_second_videorl_train_on_a_run_in_use_is_refused_naming_its_pid(task: Any, tmp_path: Path) -> None:
    """Two trainings in one output_dir would delete each other's checkpoint in flight and cut
    metrics.jsonl: the second is refused before it builds anything, and the first keeps its lock."""
    from videorl.runs.lock import LOCK_FILE, FolderLock

    run, config_file = tmp_path / "run", tmp_path / "train.yaml"
    config_file.write_text("")
    args = [sys.executable, "-m", "videorl.cli", "train", str(config_file), *_overrides(task, run, 1)]
    with FolderLock.acquire(run, "the output_dir"):  # a run in progress: this process writes it
        done = subprocess.run(args, capture_output=True, text=True, timeout=300)
        assert done.returncode != 0
        assert f"is the output_dir of another running process (pid {os.getpid()} on " in done.stderr
        assert "Traceback" not in done.stderr
        assert sorted(p.name for p in run.iterdir()) == [LOCK_FILE]  # nothing of the second run
    build_training(load_config(None, _overrides(task, run, 1)), load_plugins()).run()  # free again
    assert not (run / LOCK_FILE).exists()


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_loses_and_repeats_nothing(task: Any, tmp_path: Path) -> None:
    run = tmp_path / "run"
    config_file = tmp_path / "train.yaml"
    config_file.write_text("")
    args = [
        sys.executable,
        "-m",
        "videorl.cli",
        "train",
        str(config_file),
        *_overrides(task, run, 6, "trainer.save_every=2", "trainer.val_every=0"),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # kill once step 3 is logged: mid-way to the next checkpoint
        metrics = run / "metrics.jsonl"
        if metrics.is_file() and len(read_metrics(metrics)) >= 3:
            break
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(read_metrics(run / "metrics.jsonl")) >= 3
    done = subprocess.run([*args, "--resume", "auto"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [r["step"] for r in read_metrics(run / "metrics.jsonl")]
    assert steps == [1, 2, 3, 4, 5, 6]

    # the resumed run equals an uninterrupted one: same data order and RNG from the checkpoint
    straight = tmp_path / "straight"
    args2 = [a.replace(str(run), str(straight)) for a in args]
    subprocess.run(args2, env=env, check=True, capture_output=True)
    a = read_metrics(run / "metrics.jsonl")
    b = read_metrics(straight / "metrics.jsonl")
    assert [r["reward/overall"] for r in a] == pytest.approx([r["reward/overall"] for r in b], abs=1e-6)


# --- joint image-video training, dynamic sampling, KL ----------------------------------------------


def _video_image_text_dataset(task: tuple[Path, Path, Path, Path], out: Path) -> Path:
    """Rows in file order video, image (a PNG of a red square), text; all multiple choice."""
    from PIL import Image

    _, _, train, _ = task
    video = json.loads(train.read_text().splitlines()[0])
    picture = Image.new("RGB", (demo.SIDE, demo.SIDE), (10, 10, 10))
    picture.paste(demo.COLOURS["red"], (8, 8, 8 + demo.SQUARE, 8 + demo.SQUARE))
    picture.save(out / "red.png")
    common = {
        "problem_type": "multiple choice",
        "problem": demo.QUESTION,
        "options": demo.OPTIONS,
        "answer": "A",
        "offline_output": "<answer>A</answer>",
    }
    rows = [
        {**video, "videos": [str(train.parent / video["videos"][0])]},
        {**common, "id": "image-0", "data_type": "image", "images": [str(out / "red.png")]},
        {
            **common,
            "id": "text-0",
            "data_type": "text",
            "problem": "Which letter comes first?",
            "options": ["A. a", "B. b", "C. c", "D. d"],
        },
    ]
    path = out / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class _RecordingEncoder:
    """The run's encoder, recording every sample the loop encodes (in order); closed with the run."""

    def __init__(self, encode: Any) -> None:
        self.encode = encode
        self.seen: list[Any] = []

    def __call__(self, sample: Any) -> Any:
        self.seen.append(sample)
        return self.encode(sample)

    def close(self) -> None:
        self.encode.close()


def _recording(training: Any) -> list[Any]:
    """Record every sample the loop encodes (in order)."""
    training.encode = _RecordingEncoder(training.encode)
    return training.encode.seen


@pytest.fixture(scope="module")
def qwen2_task(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    out = tmp_path_factory.mktemp("task-qwen2")
    model, train, val = demo.prepare(out, load_plugins(), family="qwen2_vl", seed=0, train=2, val=1)
    return out, model, train, val


@pytest.mark.parametrize("family_task", ["task", "qwen2_task"])
def test_one_batch_of_video_image_and_text_trains_the_vision_tower(
    family_task: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    import torch

    chosen = request.getfixturevalue(family_task)
    data = _video_image_text_dataset(chosen, tmp_path)
    overrides = [
        *_overrides(
            chosen,
            tmp_path / "run",
            1,
            f"data.train_files=[{data}]",
            "data.shuffle=false",
            "data.rollout_batch_size=3",
            "actor.global_batch_size=3",
            "trainer.val_every=0",
        )
    ]
    training = build_training(load_config(None, overrides), load_plugins())
    seen = _recording(training)
    before = {k: v.clone() for k, v in training.actor.model.named_parameters()}
    rows: list[dict[str, float]] = []
    training.run(on_step=lambda step, m: rows.append(m))
    assert [s.data_type for s in seen] == ["video", "image", "text"]  # one micro-batch holds all three
    assert all(torch.isfinite(torch.tensor(v)) for v in rows[0].values())
    tower = {k: v for k, v in training.actor.model.named_parameters() if k.startswith("model.visual.")}
    unchanged = [k for k, v in tower.items() if torch.equal(v, before[k])]
    assert tower and not unchanged  # the image and the video both reach every vision parameter


def _rewards_by_sample(flat_ids: set[str]) -> Any:
    """A reward of 1.0 for every response to the samples in ``flat_ids`` (their groups teach nothing),
    and a response-dependent reward below 0.5 for the others."""
    from videorl.rewards.router import RewardRouter
    from videorl.rewards.types import RewardOutput

    def reward(inp: Any) -> RewardOutput:
        if inp.sample_id in flat_ids:
            return RewardOutput(1.0)
        return RewardOutput((sum(map(ord, inp.response)) % 97) / 200)

    return RewardRouter.of({"multiple choice": reward})


def test_dynamic_sampling_drops_equal_reward_groups_and_refills_from_the_data(
    task: Any, tmp_path: Path
) -> None:
    _, _, train, _ = task
    ids = [json.loads(line)["id"] for line in train.read_text().splitlines()]
    config = load_config(
        None,
        _overrides(
            task,
            tmp_path / "run",
            1,
            "algorithm.dynamic_sampling=true",
            "data.shuffle=false",
            "rollout.enable_mix_policy=false",
            "trainer.val_every=0",
        ),
    )
    training = build_training(config, load_plugins())
    training.rewards = _rewards_by_sample(set(ids[:3]))
    seen = _recording(training)
    rows: list[dict[str, float]] = []
    training.run(on_step=lambda step, m: rows.append(m))
    # round 1 takes samples 0, 1 (both dropped); round 2 takes 2, 3 (2 dropped); round 3 takes 4
    assert [s.id for s in seen] == ids[:5]
    assert rows[0]["dynamic_sampling/dropped_groups"] == 3.0
    assert rows[0]["dynamic_sampling/rounds"] == 3.0
    assert rows[0]["reward/overall"] < 0.5  # only the groups of samples 3 and 4 were trained on
    assert training.data.state_dict() == {"epoch": 0, "index": 5}


def test_dynamic_sampling_keeps_the_batch_full_when_every_group_is_flat(task: Any, tmp_path: Path) -> None:
    _, _, train, _ = task
    ids = [json.loads(line)["id"] for line in train.read_text().splitlines()]
    config = load_config(
        None,
        _overrides(
            task,
            tmp_path / "run",
            1,
            "algorithm.dynamic_sampling=true",
            "algorithm.dynamic_sampling_max_tries=2",
            "data.shuffle=false",
            "rollout.enable_mix_policy=false",
            "trainer.val_every=0",
        ),
    )
    training = build_training(config, load_plugins())
    training.rewards = _rewards_by_sample(set(ids))
    rows: list[dict[str, float]] = []
    training.run(on_step=lambda step, m: rows.append(m))
    assert rows[0]["dynamic_sampling/dropped_groups"] == 4.0 and rows[0]["dynamic_sampling/rounds"] == 2.0
    assert rows[0]["reward/overall"] == 1.0 and rows[0]["actor/loss"] == 0.0  # zero advantage everywhere


def test_kl_to_a_frozen_reference_is_zero_at_step_one_then_grows(task: Any, tmp_path: Path) -> None:
    import torch

    config = load_config(
        None,
        _overrides(
            task,
            tmp_path / "run",
            2,
            "algorithm.use_kl_loss=true",
            "algorithm.kl_coef=0.1",
            "trainer.val_every=0",
        ),
    )
    training = build_training(config, load_plugins())
    reference = training.actor.reference
    assert reference is not None and reference is not training.actor.model
    frozen = {k: v.clone() for k, v in reference.state_dict().items()}
    rows: list[dict[str, float]] = []
    training.run(on_step=lambda step, m: rows.append(m))
    assert rows[0]["actor/kl"] == pytest.approx(0.0, abs=1e-7)  # the policy is the reference at step 1
    assert rows[1]["actor/kl"] > 1e-6 and rows[1]["time/reference"] > 0
    assert all(torch.equal(v, frozen[k]) for k, v in reference.state_dict().items())
    assert not any(p.requires_grad for p in reference.parameters())


def test_learning_rate_warms_up_linearly_then_stays(task: Any, tmp_path: Path) -> None:
    config = load_config(
        None,
        _overrides(
            task, tmp_path / "run", 3, "optim.lr_warmup_steps=2", "optim.lr=1e-3", "trainer.val_every=0"
        ),
    )
    rows: list[dict[str, float]] = []
    build_training(config, load_plugins()).run(on_step=lambda step, m: rows.append(m))
    assert [r["actor/lr"] for r in rows] == pytest.approx([5e-4, 1e-3, 1e-3])


def test_engine_options_and_process_count_are_checked_before_training(task: Any, tmp_path: Path) -> None:
    from videorl.parallel import Parallel

    config = load_config(
        None, _overrides(task, tmp_path / "r", 1, "rollout.engine_options={max_model_len: 64}")
    )
    with pytest.raises(
        ConfigError, match=r"rollout\.engine_options\.max_model_len: the hf engine takes no option"
    ):
        build_training(config, load_plugins())
    config = load_config(
        None, _overrides(task, tmp_path / "r", 1, "data.rollout_batch_size=3", "actor.global_batch_size=3")
    )
    with pytest.raises(ConfigError, match=r"data\.rollout_batch_size \(3\) must be a multiple of .* \(2\)"):
        build_training(config, load_plugins(), dist=Parallel(rank=0, world_size=2))


def test_bf16_compute_keeps_float32_master_weights(task: Any, tmp_path: Path) -> None:
    """At the recipe's lr of 1e-6 a bf16 weight of 0.02 cannot move (its spacing is ~1.2e-4):
    the actor keeps float32 masters and only computes in bf16."""
    import torch

    config = load_config(None, _overrides(task, tmp_path / "run", 1, "model.dtype=bfloat16", "optim.lr=1e-6"))
    training = build_training(config, load_plugins())
    model = training.actor.model
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert training.actor.compute_dtype == torch.bfloat16
    before = {k: v.clone() for k, v in model.state_dict().items()}
    training.run()
    moved = [
        k
        for k, v in model.state_dict().items()
        if v.is_floating_point() and 0 < float((v - before[k]).abs().max()) < 1e-4
    ]
    assert moved  # updates far below bf16's resolution landed in the float32 masters


def test_an_engine_that_can_sleep_sleeps_for_each_update_and_wakes_with_new_weights(
    task: Any, tmp_path: Path
) -> None:
    """The loop frees a sleeping-capable engine's memory before every update of its own copy and
    refreshes it after (vLLM's sleep mode on GPUs; here a recording stand-in around the hf engine)."""
    from videorl.train.local import train

    run = tmp_path / "run"
    training = build_training(
        load_config(None, _overrides(task, run, 2, "trainer.val_every=0")), load_plugins()
    )
    calls: list[str] = []
    inner = training.engine

    class Sleepy:
        capabilities = EngineCapabilities(can_sleep=True)

        def generate(self, prompts: Any, params: Any) -> Any:
            calls.append("generate")
            return inner.generate(prompts, params)

        def update_weights(self, state: Any) -> None:
            calls.append("update_weights")

        def sleep(self) -> None:
            calls.append("sleep")

        def close(self) -> None:
            pass

    t = training
    train(
        t.config,
        actor=t.actor,
        algorithm=t.algorithm,
        workflow=t.workflow,
        engine=Sleepy(),
        rewards=t.rewards,
        data=t.data,
        encode=t.encode,
        io=t.io,
        dist=t.dist,
        engine_shares_actor=False,
    )
    t.close()
    assert calls == ["generate", "sleep", "update_weights"] * 2
