"""``videorl models check`` on tiny models: every family passes with both engines at the pinned versions,
and each deliberately broken fixture fails the check it breaks, with its cause; the training run's
first-step check stops (or warns about) a mismatched engine. With vLLM this is every family's engine
parity test: prompt ids, grids, positions, greedy tokens, and the log-probs of sampled video, image,
text and mixed prompts against the teacher-forced training forward (a sampled forbidden id fails)."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from videorl.actor.parity import ParityError, tolerance_for
from videorl.commands.models import models_group
from videorl.diagnostics.models_check import probe_prompts, run_check
from videorl.plugins import load_plugins
from videorl.rollout.factory import make_engine

MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")


def _check(model: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        models_group, ["check", str(model), *args], obj=load_plugins(), catch_exceptions=False
    )
    return result.exit_code, result.stdout


def _rows(report: Any, status: str) -> list[Any]:
    return [r for r in report.results if r.status == status]


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_every_qwen_model_type_passes_with_the_hf_engine(
    model_type: str, tiny_model_dir: Callable[[str], Path]
) -> None:
    code, out = _check(tiny_model_dir(model_type), "--engine", "hf", "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"], out
    checks = {(r["sample"], r["check"]): r for r in report["results"]}
    assert checks[("two-videos", "logprobs")]["status"] == "PASS"
    assert checks[("two-images", "logprobs")]["status"] == "PASS"  # several images in one prompt
    assert checks[("two-images", "placeholders")]["status"] == "PASS"
    assert checks[("video-long-lowres", "positions")]["status"] == "PASS"  # 3-D positions were compared
    assert checks[("mixed-batch", "logprobs")]["status"] == "PASS"
    assert report["tolerance"] == {"token": 1e-3, "mean": 1e-4}  # float32 without --config


def _hf_report(backend: Any, dtype: str = "float32") -> Any:
    """``run_check`` of ``backend`` against the hf engine (each loads the model through the backend)."""
    import torch

    engine = make_engine(load_plugins(), "hf", backend, model_path=str(backend.path), dtype=dtype, seed=0)
    return run_check(
        backend,
        engine,
        backend.load_model(dtype=torch.float32),
        engine_name="hf",
        dtype=dtype,
        tolerance=tolerance_for(dtype),
        prompts=probe_prompts(backend, backend.budget),
        compute_dtype=getattr(torch, dtype),
    )


def test_a_backend_with_transformers_rotary_rule_fails_the_positions_check(
    tiny_model_dir: Callable[[str], Path],
) -> None:
    from videorl_models.qwen2_5_vl import Qwen2_5VLBackend

    class SwappedRope(Qwen2_5VLBackend):
        def prepare_model(self, model: Any) -> Any:
            return model  # keeps transformers' get_rope_index: text resumes at start + max(h, w)

    report = _hf_report(SwappedRope(tiny_model_dir("qwen2_5_vl")))
    failed = {(r.sample, r.check): r for r in _rows(report, "FAIL")}
    # the long clip alone: where the spatial extent is the larger the two rules agree (the 2-6 s range
    # too, now that its frames reach transformers at their own rate, 1 s per temporal patch, and not
    # at the whole 12 s video's 3 s)
    assert set(failed) == {("video-long-lowres", "positions")}, report.table()
    row = failed[("video-long-lowres", "positions")]
    # 16 temporal patches of 2×2 merged tokens, 2 tokens/s at 1 s per patch: the video's last time
    # position is start + 30, so text resumes at start + 31; transformers resumes at start + 2
    assert row.engine[0] - row.trainer[0] == 29
    assert "rope positions after the video differ" in row.cause and "transformers' rule" in row.cause
    assert not report.ok and "FAIL (1 of" in report.table()


def test_a_processor_that_resizes_again_fails_the_grids_check(tiny_model_dir: Callable[[str], Path]) -> None:
    from videorl_models.qwen2_vl import Qwen2VLBackend

    class Resizing(Qwen2VLBackend):
        def _processor_kwargs(self) -> dict[str, Any]:  # resizes to at most 2×3 patches again
            return {
                "do_resize": True,
                "size": {"shortest_edge": 3136, "longest_edge": 6 * 28 * 28},
                "do_sample_frames": False,
            }

    report = _hf_report(Resizing(tiny_model_dir("qwen2_vl")))
    failed = {r.sample: r for r in _rows(report, "FAIL")}
    # every video larger than the new budget: all but the long 56×56 one (already within it)
    assert set(failed) == {"video-30fps-4s", "video-10fps-1.7s", "video-clip-2-6s", "two-videos"}, (
        report.table()
    )
    for row in failed.values():
        assert row.check == "grids"
        assert "the processor resized or resampled the frames" in row.cause


def test_a_chat_template_that_drops_the_video_placeholder_fails_the_placeholders_check(
    tiny_model_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    import shutil

    from videorl.backend import backend_for_model

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir("qwen3_vl"), model)
    template = (model / "chat_template.jinja").read_text()
    broken = template.replace("<|vision_start|><|video_pad|><|vision_end|>", "")
    assert broken != template
    (model / "chat_template.jinja").write_text(broken)
    report = _hf_report(backend_for_model(model, load_plugins().model_backends))
    failed = {r.sample: r for r in _rows(report, "FAIL")}
    assert set(failed) == {
        "video-30fps-4s",
        "video-10fps-1.7s",
        "video-clip-2-6s",
        "video-long-lowres",
        "two-videos",
    }, report.table()
    assert all(r.check == "placeholders" for r in failed.values())
    assert (
        "0 video placeholder(s)" in failed["two-videos"].cause and "2 video(s)" in failed["two-videos"].cause
    )
    assert "chat template does not render every media item" in failed["two-videos"].cause


# --- with vLLM (CPU build): in subprocesses, vLLM changes process-wide settings -----------------------

# ``python -c _CHECKS JOBS_JSON OUT_JSON``: ``videorl models check MODEL --engine vllm --json ARGS`` once
# per job, all in this one process (vLLM's import and first start, about half of a check, are paid once);
# a job with a ``no_fps`` backend ("module:Class") checks that backend with the fps left out of its
# engine requests. Writes each job's exit code and report, in the jobs' order.
_CHECKS = """
import contextlib, importlib, io, json, sys

import videorl.backend
from videorl.cli import main

found_backend = videorl.backend.backend_for_model


def no_fps_backend(spec):
    module, name = spec.split(":")

    class NoFps(getattr(importlib.import_module(module), name)):
        def rollout_request(self, encoded):
            request = super().rollout_request(encoded)
            for i, (frames, meta) in enumerate(request.multi_modal_data.get("video", [])):
                request.multi_modal_data["video"][i] = (frames, {k: v for k, v in meta.items() if k != "fps"})
            return request

    return lambda path, registry, **kw: NoFps(path)


results = []
for job in json.loads(sys.argv[1]):
    videorl.backend.backend_for_model = no_fps_backend(job["no_fps"]) if job["no_fps"] else found_backend
    report = io.StringIO()
    with contextlib.redirect_stdout(report):
        try:
            main(["models", "check", job["model"], "--engine", "vllm", "--json", *job["args"]])
            code = 0
        except SystemExit as exc:
            code = exc.code
    try:
        results.append([code, json.loads(report.getvalue())])
    except json.JSONDecodeError:
        results.append([code, report.getvalue()])
open(sys.argv[2], "w").write(json.dumps(results))
"""

PASSING = {  # qwen3_5*: vLLM's CPU gated-delta kernel runs in bf16 only
    "qwen2_vl": "float32",
    "qwen2_5_vl": "float32",
    "qwen3_vl": "float32",
    "qwen3_vl_moe": "float32",
    "qwen3_5": "bfloat16",
    "qwen3_5_moe": "bfloat16",
}
NO_FPS = {  # Qwen3-VL: vLLM fails on the request; Qwen2.5-VL: it silently assumes another rate
    "qwen3_vl": "videorl_models.qwen3_vl:Qwen3VLBackend",
    "qwen2_5_vl": "videorl_models.qwen2_5_vl:Qwen2_5VLBackend",
}


@pytest.fixture(scope="module")
def llava(
    tmp_path_factory: pytest.TempPathFactory,
    vllm_env: dict[str, str],
    install_plugin: Callable[[Path, Path], Path],
) -> tuple[Path, dict[str, str]]:
    """The contrib LLaVA-OneVision plugin installed as a user would (tests/conftest.py) and a tiny model
    built by its ``videorl models tiny``: the model and the environment that sees the plugin (shared by
    both engines' checks)."""
    tmp = tmp_path_factory.mktemp("llava")
    root = Path(__file__).resolve().parents[1]
    target = install_plugin(root / "contrib" / "videorl-models-llava-onevision", tmp)
    env = {
        **os.environ,
        **vllm_env,
        "PYTHONPATH": os.pathsep.join([str(target), vllm_env["PYTHONPATH"]]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": "2",
    }
    env.pop("VIDEORL_DISABLE_PLUGINS", None)
    model = tmp / "model"
    subprocess.run(
        [sys.executable, "-m", "videorl.cli", "models", "tiny", "llava_onevision", str(model)],
        check=True,
        capture_output=True,
        env=env,
    )
    return model, env


@pytest.fixture(scope="module")
def vllm_reports(
    tiny_model_dir: Callable[[str], Path],
    llava: tuple[Path, dict[str, str]],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[tuple[str, str], tuple[int, dict[str, Any]]]:
    """``(model_type, "pass" | "no-fps")``: the exit code and JSON report of ``videorl models check
    --engine vllm`` on that tiny model (``llava_onevision``: the contrib plugin's), every check of this
    file run in one subprocess with the plugin installed (vLLM changes process-wide settings that must
    not leak into pytest). The passing checks come first: a failed request cannot leak into them."""
    pytest.importorskip("vllm")
    llava_model, env = llava
    jobs = {
        **{(m, "pass"): (tiny_model_dir(m), ["--dtype", dtype], "") for m, dtype in PASSING.items()},
        ("llava_onevision", "pass"): (llava_model, [], ""),
        **{(m, "no-fps"): (tiny_model_dir(m), [], spec) for m, spec in NO_FPS.items()},
    }
    out = tmp_path_factory.mktemp("vllm-checks") / "reports.json"
    listed = [{"model": str(model), "args": args, "no_fps": spec} for model, args, spec in jobs.values()]
    done = subprocess.run(
        [sys.executable, "-c", _CHECKS, json.dumps(listed), str(out)],
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
    )
    assert done.returncode == 0 and out.exists(), done.stdout[-2000:] + done.stderr[-4000:]
    results = json.loads(out.read_text())
    return {key: (code, report) for key, (code, report) in zip(jobs, results, strict=True)}


@pytest.mark.slow
@pytest.mark.parametrize("model_type", PASSING)
def test_vllm_engine_passes(model_type: str, vllm_reports: dict[tuple[str, str], tuple[int, Any]]) -> None:
    code, report = vllm_reports[model_type, "pass"]
    assert code == 0 and report["ok"], report
    assert report["dtype"] == PASSING[model_type]
    statuses = {(r["sample"], r["check"]): r["status"] for r in report["results"]}
    assert statuses[("two-videos", "frame_metadata")] == "PASS"
    assert statuses[("video-clip-2-6s", "grids")] == "PASS"  # the processor rebuilt the engine's grids
    assert statuses[("image", "grids")] == "PASS"
    assert statuses[("two-images", "grids")] == "PASS" and statuses[("two-images", "logprobs")] == "PASS"


@pytest.mark.slow
def test_an_engine_request_without_fps_fails_with_its_cause(
    vllm_reports: dict[tuple[str, str], tuple[int, Any]],
) -> None:
    """Qwen3-VL: vLLM fails on the request; Qwen2.5-VL: it silently assumes another rate, which the
    long and clipped videos' log-probs show."""
    code, report = vllm_reports["qwen3_vl", "no-fps"]
    assert code == 1 and not report["ok"], report
    failed = {(r["sample"], r["check"]): r for r in report["results"] if r["status"] == "FAIL"}
    meta = failed[("video-30fps-4s", "frame_metadata")]
    assert meta["trainer"] == "fps=30" and meta["engine"] == "missing"
    assert meta["cause"].startswith("fps missing on the engine side (video 0)")
    assert failed[("video-30fps-4s", "engine")]["cause"].startswith(
        "the engine failed on this request: TypeError"
    )
    assert not any(sample in ("text", "image") for sample, _ in failed)

    code, report = vllm_reports["qwen2_5_vl", "no-fps"]
    assert code == 1, report
    failed = {(r["sample"], r["check"]): r for r in report["results"] if r["status"] == "FAIL"}
    assert ("video-30fps-4s", "frame_metadata") in failed and ("video-30fps-4s", "engine") not in failed
    lp = failed[("video-long-lowres", "logprobs")]
    assert lp["cause"].startswith("follows from the frame_metadata failure: fps missing on the engine side")
    assert not any(sample in ("text", "image", "mixed-batch") for sample, _ in failed)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_the_contrib_llava_onevision_backend_passes(
    engine: str, llava: tuple[Path, dict[str, str]], request: pytest.FixtureRequest
) -> None:
    """Videos and text pass, images (not supported by the backend) are n/a, and its 1-D positions are
    not compared."""
    if engine == "vllm":
        code, report = request.getfixturevalue("vllm_reports")["llava_onevision", "pass"]
        assert code == 0 and report["ok"], report
    else:
        model, env = llava
        done = subprocess.run(
            [sys.executable, "-m", "videorl.cli", "models", "check", str(model), "--engine", "hf", "--json"],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
        )
        report = json.loads(done.stdout)
        assert done.returncode == 0 and report["ok"], done.stdout + done.stderr[-3000:]
    statuses = {(r["sample"], r["check"]): r["status"] for r in report["results"]}
    assert statuses[("image", "encode")] == "n/a"
    assert statuses[("two-videos", "logprobs")] == "PASS" and statuses[("text", "greedy")] == "PASS"
    assert statuses[("video-30fps-4s", "positions")] == "n/a"


# --- the training run's first-step check --------------------------------------------------------------


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    from videorl import demo

    out = tmp_path_factory.mktemp("task")
    model, train, val = demo.prepare(out, load_plugins(), family="qwen2_5_vl", seed=0, train=4, val=2)
    return out, model, train, val


def _mismatched_training(task: Any, run: Path, *extra: str) -> Any:
    """A training run whose engine generates with another model (seed 1) than the actor (seed 0)."""
    from videorl import demo
    from videorl.backend import backend_for_model
    from videorl.config import load_config
    from videorl.rollout.hf import HFEngine
    from videorl.train.compose import build_training
    from videorl_models.tiny import build_tiny

    out, model, train, val = task
    overrides = [
        *demo.demo_overrides(out, model, train, val, steps=2, seed=3, engine="hf"),
        f"output_dir={run}",
        "data.rollout_batch_size=2",
        "actor.global_batch_size=2",
        "rollout.n=2",
        "trainer.progress_bar=false",
        "trainer.val_every=0",
        "model.dtype=float32",
        *extra,
    ]
    training = build_training(load_config(None, overrides), load_plugins())
    other = backend_for_model(
        build_tiny("qwen2_5_vl", run.parent / "other", seed=1, width=128), load_plugins().model_backends
    )
    training.engine = HFEngine(training.actor.backend, other.load_model(), owns_model=True)
    training.engine_shares_actor = False
    return training


def test_training_with_a_mismatched_engine_stops_at_step_1_with_the_table(task: Any, tmp_path: Path) -> None:
    training = _mismatched_training(task, tmp_path / "run")
    before = {k: v.clone() for k, v in training.actor.model.state_dict().items()}
    steps: list[int] = []
    with pytest.raises(ParityError) as err:
        training.run(on_step=lambda step, m: steps.append(step))
    text = str(err.value)
    assert steps == []
    assert re.search(r"video +logprobs \(mean\) +FAIL", text), text
    assert "videorl models check" in text and "rollout.parity_check=warn" in text
    after = training.actor.model.state_dict()
    assert all((before[k] == after[k]).all() for k in before)  # stopped before any update


def test_with_warn_the_run_continues_and_logs_the_gap_per_modality(
    task: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from videorl.runs.history import read_metrics

    training = _mismatched_training(task, tmp_path / "run", "rollout.parity_check=warn")
    with caplog.at_level(logging.WARNING, logger="videorl.parity"):
        assert training.run() == 2
    assert re.search(r"video +logprobs \(mean\) +FAIL", caplog.text)
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert rows[0]["parity/logprob_diff/video"] > 0.02  # another model's log-probs
    assert rows[0]["rollout/logprob_diff/video"] == pytest.approx(
        rows[0]["parity/logprob_diff/video"], rel=1e-4
    )
    assert "parity/logprob_diff/video" not in rows[1]  # checked on the first step only
    assert rows[1]["rollout/logprob_diff/video"] < 1e-5  # the engine got the actor's weights after step 1


def test_the_config_s_budget_dtype_and_engine_are_used(
    tiny_model_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(
        "model: {path: elsewhere, dtype: float32}\n"
        "data: {train_files: [train.jsonl], video_fps: 1.0, video_max_frames: 4}\n"
        "rollout: {engine: hf, parity_tolerance: 0.002}\n"
    )
    code, out = _check(tiny_model_dir("qwen2_5_vl"), "--config", str(config), "--json")
    report = json.loads(out)
    assert code == 0 and (report["engine"], report["dtype"]) == ("hf", "float32")
    assert report["tolerance"] == {"token": 2e-3, "mean": pytest.approx(2e-4)}
    spans = {r["sample"]: r["trainer"] for r in report["results"] if r["check"] == "placeholders"}
    # 4 s at 1 fps: 4 frames, 2 temporal patches of 6×8 merged tokens (at the default 2 fps: 4 patches)
    assert spans["video-30fps-4s"] == "1 span(s), 96 tokens"
    assert spans["video-long-lowres"] == "1 span(s), 8 tokens"  # capped at 4 frames: 2 patches of 2×2


class Rescaled:
    """An engine that reports its log-probs 1.5 times too large, whatever weights it has."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def generate(self, prompts: Any, params: Any) -> list[list[Any]]:
        from videorl.rollout import Completion

        return [
            [Completion(c.token_ids, [1.5 * x for x in c.logprobs], c.finish_reason) for c in group]
            for group in self.engine.generate(prompts, params)
        ]

    def update_weights(self, state_dict: Any) -> None:
        self.engine.update_weights(state_dict)

    def close(self) -> None:
        self.engine.close()


def test_the_check_runs_again_on_the_first_step_after_a_resume(task: Any, tmp_path: Path) -> None:
    from videorl import demo
    from videorl.config import load_config
    from videorl.train.compose import build_training

    out, model, train, val = task
    run = tmp_path / "run"
    overrides = [
        *demo.demo_overrides(out, model, train, val, steps=1, seed=3, engine="hf"),
        f"output_dir={run}",
        "data.rollout_batch_size=2",
        "actor.global_batch_size=2",
        "rollout.n=2",
        "trainer.progress_bar=false",
        "trainer.val_every=0",
        "trainer.save_every=1",
    ]
    assert build_training(load_config(None, overrides), load_plugins()).run() == 1  # a matched engine
    resumed = build_training(
        load_config(None, [*overrides, "trainer.resume=auto", "trainer.max_steps=2"]), load_plugins()
    )
    resumed.engine = Rescaled(resumed.engine)  # a mismatch that survives the weight refresh of a resume
    steps: list[int] = []
    with pytest.raises(ParityError, match=r"video +logprobs \(mean\) +FAIL"):
        resumed.run(on_step=lambda step, m: steps.append(step))
    assert steps == []  # step 2, the first after the resume, stopped before its update


def test_videorl_train_stops_with_the_table_and_the_command_to_run(task: Any, tmp_path: Path) -> None:
    """The command line: a tolerance below bfloat16's rounding (autocast actor vs the float32 weights
    the hf engine samples with) stops the run at step 1 with exit 1, the table and what to do."""
    from videorl import demo

    out, model, train, val = task
    overrides = [
        *demo.demo_overrides(out, model, train, val, steps=1, seed=3, engine="hf"),
        f"output_dir={tmp_path / 'run'}",
        "data.rollout_batch_size=2",
        "actor.global_batch_size=2",
        "rollout.n=2",
        "trainer.progress_bar=false",
        "model.dtype=bfloat16",
        "rollout.parity_tolerance=1e-9",
    ]
    config = tmp_path / "run.yaml"
    config.write_text("{}\n")  # everything from the overrides
    done = subprocess.run(
        [sys.executable, "-m", "videorl.cli", "train", str(config), *overrides],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert re.search(r"video +logprobs \(mean\) +FAIL", done.stderr), done.stderr[-3000:]
    assert f"videorl models check {model} --engine hf --config CONFIG" in done.stderr
    assert not (tmp_path / "run" / "checkpoints").exists() or not any(
        (tmp_path / "run" / "checkpoints").iterdir()
    )
