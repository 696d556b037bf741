"""The evaluator (``videorl eval run``): stages, failure accounting, resume, determinism, settings.

The benchmark is MVBench in its official layout (``json/<task>.json``, ``video/<folder>/...``),
written here with a few rows and real H.264 clips made with PyAV; the model is a tiny random
Qwen2.5-VL (``tiny_model_dir``), or a scripted engine where the test needs answers it can count.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from videorl.backend import backend_for_model
from videorl.eval import read_predictions
from videorl.eval.inputs import RowInputs
from videorl.eval.pipeline import Evaluator, load_task
from videorl.eval.results import begin_run
from videorl.media import DecodeParams, ImageParams, MediaCache, MediaError, read_header
from videorl.media.synthetic import index_frames, read_index, textured_frames, write_video
from videorl.plugins import load_plugins
from videorl.rollout import Completion, SamplingParams

FAMILY = "qwen2_5_vl"
PLAIN = ("clevrer/video_validation", "object_existence")
CLIPPED = ("star/Charades_v1_480", "action_sequence")
CANDIDATES = ["red", "green", "blue"]
QUESTIONS = (  # worded differently, so that even a random model answers them differently
    "What colour is the square in clip {}?",
    "Which direction does the object move? Think about clip {}.",
    "How many objects are in the video {}? Answer with a number.",
    "The video shows a person {} times: which colour?",
)


# --- fixtures -----------------------------------------------------------------------------------


def write_mvbench(
    root: Path,
    *,
    plain: int,
    clipped: int = 0,
    missing: Sequence[int] = (),
    answers: Sequence[int] = (0, 1, 2),
    index_video: bool = False,
) -> Path:
    """MVBench files: ``plain`` object_existence rows (rows in ``missing`` name an absent video) and
    ``clipped`` action_sequence rows with clip bounds [1.0, 2.0] s; 2 s clips at 10 fps, 64×80 px.
    Row i's answer is ``CANDIDATES[answers[i % len(answers)]]``."""
    for folder, task, count in ((PLAIN[0], PLAIN[1], plain), (CLIPPED[0], CLIPPED[1], clipped)):
        if not count:
            continue
        videos = root / "video" / folder
        videos.mkdir(parents=True, exist_ok=True)
        rows = []
        for i in range(count):
            name = f"absent-{i}.mp4" if i in missing and task == PLAIN[1] else f"{task}-{i}.mp4"
            if not name.startswith("absent"):
                frames = index_frames(40, 64, 80) if index_video else textured_frames(20, 64, 80, seed=i)
                write_video(videos / name, frames, fps=20.0 if index_video else 10.0)
            row: dict[str, Any] = {
                "video": name,
                "question": QUESTIONS[i % len(QUESTIONS)].format(i),
                "candidates": CANDIDATES,
                "answer": CANDIDATES[answers[i % len(answers)]],
            }
            if task == CLIPPED[1]:
                row.update(start=1.0, end=2.0)
            rows.append(row)
        (root / "json").mkdir(parents=True, exist_ok=True)
        (root / "json" / f"{task}.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def plugins() -> Any:
    return load_plugins()


@pytest.fixture(scope="module")
def backend(tiny_model_dir: Callable[[str], Path], plugins: Any) -> Any:
    return backend_for_model(tiny_model_dir(FAMILY), plugins.model_backends)


def make_inputs(backend: Any, cache_dir: Path, **video: Any) -> RowInputs:
    params = DecodeParams.from_budget(
        backend.budget, factor=backend.factor, temporal_patch_size=backend.temporal_patch_size, **video
    )
    image = ImageParams.from_budget(backend.budget, factor=backend.factor)
    return RowInputs(backend, MediaCache(cache_dir, strict_params=False), params, image)


GREEDY = SamplingParams(n=1, temperature=0, max_tokens=6, seed=0)


class ScriptedEngine:
    """Answers each prompt with a fixed text; raises when a batch holds a prompt in ``broken``."""

    def __init__(self, tokenizer: Any, answers: dict[str, str], broken: Sequence[str] = ()) -> None:
        self.tokenizer = tokenizer
        self.answers = answers
        self.broken = set(broken)
        self.calls: list[list[str]] = []

    def generate(self, prompts: Sequence[Any], params: SamplingParams) -> list[list[Completion]]:
        ids = [p.sample_id for p in prompts]
        self.calls.append(ids)
        if self.broken & set(ids):
            raise RuntimeError(f"the engine crashed on {sorted(self.broken & set(ids))}")
        out = []
        for sample_id in ids:
            tokens = self.tokenizer(self.answers[sample_id], add_special_tokens=False)["input_ids"]
            tokens.append(self.tokenizer.eos_token_id)
            out.append([Completion(tokens, [0.0] * len(tokens), "stop")])
        return out

    def close(self) -> None:
        pass


class ScriptedAsyncEngine(ScriptedEngine):
    """The same answers through ``submit``: futures completed out of order by a thread pool."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pool = ThreadPoolExecutor(3)
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0

    def submit(self, prompt: Any, params: SamplingParams) -> Future[list[Completion]]:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)

        def work() -> list[Completion]:
            time.sleep(0.02 * (len(self.calls) % 3))  # later prompts may finish first
            try:
                return self.generate([prompt], params)[0]
            finally:
                with self.lock:
                    self.in_flight -= 1

        return self.pool.submit(work)

    def close(self) -> None:
        self.pool.shutdown()


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --- clip bounds --------------------------------------------------------------------------------


def test_row_inputs_sample_the_clip_itself_through_the_cache(
    tmp_path: Path, backend: Any, plugins: Any
) -> None:
    root = write_mvbench(tmp_path / "mvbench", plain=1, clipped=1, index_video=True)
    task = load_task(plugins.benchmarks, "mvbench", root)
    inputs = make_inputs(backend, tmp_path / "cache", fps=4.0, max_frames=4)
    clipped = next(r for r in task.rows if r.clip)
    assert clipped.clip == (1.0, 2.0)
    # 40 frames at 20 fps (2 s); the clip shows frames 20..39: 1 s × 4 fps = 4 frames, nearest to
    # 20 + linspace(0, 19, 4) = 20, 26.33, 32.67, 39 (the whole video's 4 frames would leave 2 inside)
    prompt = inputs.prompt(task.benchmark, clipped)
    ((frames, meta),) = prompt.videos
    assert meta.frame_indices == (20, 26, 33, 39)
    assert [read_index(f.numpy()) for f in frames] == [20, 26, 33, 39]
    assert meta.timestamps == pytest.approx((1.0, 1.3, 1.65, 1.95))
    assert (meta.duration, meta.sampled_fps) == pytest.approx((1.0, 4.0)) and meta.extra["clip"] == [1.0, 2.0]
    assert "Carefully watch the video" not in prompt.text  # the family's prompt, not the official one
    unclipped = inputs.prompt(task.benchmark, next(r for r in task.rows if not r.clip))
    assert unclipped.videos[0][1].frame_indices == (0, 13, 26, 39)  # 2 s capped at 4: linspace(0, 39, 4)
    # built on first use; the two videos have the same content, the clip has an entry of its own
    entries = [read_header(p) for p in MediaCache(tmp_path / "cache").entry_paths()]
    assert sorted((e.params.start, e.params.end) for e in entries if e.params.start is not None) == [
        (1.0, 2.0)
    ]
    assert len(entries) == 2
    with pytest.raises(
        MediaError,
        match=r"action_sequence-0\.mp4: the time range from 5 s to 6 s starts past the "
        r"end of the video \(2 s long\)",
    ):
        inputs.video(clipped.video, (5.0, 6.0))


# --- stages, failures, scoring ------------------------------------------------------------------


@pytest.mark.parametrize("engine_kind", [ScriptedEngine, ScriptedAsyncEngine])
def test_failed_samples_count_as_wrong_and_the_score_is_the_official_one(
    tmp_path: Path, backend: Any, plugins: Any, engine_kind: type[ScriptedEngine]
) -> None:
    # object_existence: truths A B C A B (row 4's video is missing), action_sequence: A B
    root = write_mvbench(tmp_path / "mvbench", plain=5, clipped=2, missing=[4], answers=(0, 1, 2))
    task = load_task(plugins.benchmarks, "mvbench", root)
    answers = {
        "mvbench:object_existence/0": "<answer>A</answer>",  # right
        "mvbench:object_existence/1": "<answer>A</answer>",  # wrong (B)
        "mvbench:object_existence/2": "The answer is C.",  # right
        "mvbench:object_existence/3": "<answer>A</answer>",  # the engine fails on it
        "mvbench:action_sequence/0": "(A) red",  # right
        "mvbench:action_sequence/1": "<answer>C</answer>",  # wrong (B)
    }
    engine = engine_kind(backend.tokenizer, answers, broken=["mvbench:object_existence/3"])
    evaluator = Evaluator(
        make_inputs(backend, tmp_path / "cache"), engine, GREEDY, workers=2, batch_size=3, queue_size=3
    )
    report = evaluator.run([task], tmp_path / "run")
    engine.close()
    if isinstance(
        engine, ScriptedAsyncEngine
    ):  # every prompt submitted at once, at most queue_size in flight
        assert evaluator.describe()["engine_mode"] == "submit" and 1 <= engine.most_in_flight <= 3

    summary = report.results["mvbench"].summary
    assert summary["categories"]["task"] == {"action_sequence": 0.5, "object_existence": 0.4}
    assert summary["overall"] == pytest.approx(0.45)  # MVBench: the mean of the task accuracies
    assert summary["metrics"]["accuracy (pooled)"] == pytest.approx(3 / 7)
    assert summary["n"] == 7 and summary["n_failed"] == 2
    reasons = {f["id"]: f["reason"] for f in summary["failed"]}
    assert (
        "file not found" in reasons["object_existence/4"] and "absent-4.mp4" in reasons["object_existence/4"]
    )
    assert reasons["object_existence/3"].startswith("engine error: RuntimeError: the engine crashed")

    records = lines(tmp_path / "run" / "mvbench" / "predictions.jsonl")
    assert sorted(r["id"] for r in records) == sorted(r.id for r in task.rows)  # each exactly once
    by_id = {r["id"]: r for r in records}
    assert by_id["object_existence/4"]["stage"] == "load" and by_id["object_existence/3"]["stage"] == "engine"
    assert by_id["object_existence/2"]["prediction"] == "C" and by_id["object_existence/2"]["score"] == 1.0
    assert by_id["action_sequence/1"]["prediction"] == "C" and by_id["action_sequence/1"]["score"] == 0.0
    assert max(len(c) for c in engine.calls) <= 3
    assert ["mvbench:object_existence/3"] in engine.calls  # the breaking sample was isolated
    generated = [i for c in engine.calls if "mvbench:object_existence/3" not in c for i in c]
    assert sorted(generated) == sorted(k for k in answers if k != "mvbench:object_existence/3")
    scores = lines(tmp_path / "run" / "mvbench" / "scores.jsonl")
    assert [s["id"] for s in scores] == [r.id for r in task.rows]
    assert report.times.samples == 7 and report.times.failed == 2


def test_the_engine_waits_for_full_batches_but_not_past_the_last_row(
    tmp_path: Path, backend: Any, plugins: Any
) -> None:
    task = load_task(plugins.benchmarks, "mvbench", write_mvbench(tmp_path / "mvbench", plain=7))
    engine = ScriptedEngine(backend.tokenizer, {f"mvbench:{r.id}": "A" for r in task.rows})
    evaluator = Evaluator(
        make_inputs(backend, tmp_path / "cache"), engine, GREEDY, batch_size=3, batch_wait=30
    )
    report = evaluator.run([task], tmp_path / "run")
    assert [len(c) for c in engine.calls] == [3, 3, 1]
    assert report.times.wall_s < 15  # the last, partial batch went as soon as the loaders were done


def test_a_resumed_run_skips_what_is_saved_and_reruns_failed_and_torn_records(
    tmp_path: Path, backend: Any, plugins: Any
) -> None:
    root = write_mvbench(tmp_path / "mvbench", plain=4, answers=(0,))
    task = load_task(plugins.benchmarks, "mvbench", root)
    run = tmp_path / "run"
    saved = run / "mvbench" / "predictions.jsonl"
    saved.parent.mkdir(parents=True)
    saved.write_text(
        json.dumps({"id": "object_existence/0", "response": "A"})
        + "\n"
        + json.dumps({"id": "object_existence/1", "error": "engine error: out of memory"})
        + "\n"
        + '{"id": "object_existence/2", "resp',  # the line a kill cut short
        encoding="utf-8",
    )
    answers = {f"mvbench:object_existence/{i}": "<answer>A</answer>" for i in range(4)}
    engine = ScriptedEngine(backend.tokenizer, answers)
    report = Evaluator(make_inputs(backend, tmp_path / "cache"), engine, GREEDY, batch_size=8).run(
        [task], run
    )
    assert sorted(i for c in engine.calls for i in c) == [f"mvbench:object_existence/{i}" for i in (1, 2, 3)]
    assert report.times.resumed == 1 and report.results["mvbench"].summary["overall"] == 1.0
    ids = [r["id"] for r in lines(saved)]  # the torn line was cut off; the failed record is superseded
    assert ids[:2] == ["object_existence/0", "object_existence/1"] and sorted(ids[2:]) == [
        "object_existence/1",
        "object_existence/2",
        "object_existence/3",
    ]
    assert read_predictions(saved)["object_existence/1"].response == "<answer>A</answer>"


# --- with the tiny model --------------------------------------------------------------------------


def _run_args(model: Path, root: Path, out: Path, *extra: str) -> list[str]:
    return [
        "eval",
        "run",
        "--model",
        str(model),
        "--benchmark",
        "mvbench",
        "--data-root",
        str(root),
        "--out",
        str(out),
        "--cache-dir",
        str(out.parent / "cache"),
        "--max-tokens",
        "6",
        "--quiet",
        *extra,
    ]


def test_run_records_every_setting_and_eval_score_reproduces_it(
    tmp_path: Path, tiny_model_dir: Callable[[str], Path], run_cli: Callable[..., Any], plugins: Any
) -> None:
    model = tiny_model_dir(FAMILY)
    root = write_mvbench(tmp_path / "mvbench", plain=4, clipped=1, missing=[2])
    out = tmp_path / "run"
    result = run_cli(
        *_run_args(
            model,
            root,
            out,
            "--fps",
            "1",
            "--max-frames",
            "4",
            "--max-pixels",
            "6000",
            "--batch-size",
            "2",
            "--workers",
            "2",
            "--limit",
            "4",
        )
    )
    result.assert_success()
    assert "mvbench: accuracy" in result.output and "failed=1" in result.output

    data = json.loads((out / "results.json").read_text())
    s = data["settings"]
    assert s["model"] == {"path": str(model.resolve()), "family": FAMILY}
    assert s["engine"] == {"name": "hf", "dtype": "float32", "device": "cpu"}
    assert (s["video"]["fps"], s["video"]["max_frames"], s["video"]["max_pixels"]) == (1.0, 4, 6000)
    assert (s["video"]["factor"], s["video"]["temporal_patch_size"]) == (28, 2)
    assert s["image"]["factor"] == 28 and "clip" in s["clip"]
    assert s["prompt"]["family"] == FAMILY and s["prompt"]["thinking"] is False
    assert s["sampling"] == {"n": 1, "temperature": 0.0, "top_p": 1.0, "top_k": 0, "max_tokens": 6, "seed": 0}
    assert s["requirements"] == plugins.requirements()
    assert s["benchmarks"]["mvbench"] == {"data_root": str(root.resolve()), "rows": 4, "limit": 4}
    assert s["pipeline"]["batch_size"] == 2 and s["pipeline"]["engine_mode"] == "batched generate"
    summary = data["benchmarks"]["mvbench"]
    assert summary["n"] == 4 and summary["n_failed"] == 1  # action_sequence/0 + object_existence/0,1,2
    assert data["timing"]["samples"] == 4

    rescored = run_cli(
        "eval",
        "score",
        "--benchmark",
        "mvbench",
        "--data-root",
        str(root),
        "--predictions",
        str(out / "mvbench" / "predictions.jsonl"),
        "--json",
    )
    rescored.assert_success()
    # --limit 4 kept four rows; eval score reads all five, so the fifth counts as a missing prediction
    full = rescored.json()
    assert full["n"] == 5 and {"id": "object_existence/3", "reason": "missing prediction"} in full["failed"]
    rescored = run_cli(
        *_run_args(
            model, root, out, "--fps", "1", "--max-frames", "4", "--max-pixels", "6000", "--limit", "5"
        )
    )
    rescored.assert_success()  # resumed: the fifth row is new, the failed one is tried again
    summary = json.loads((out / "results.json").read_text())["benchmarks"]["mvbench"]
    assert summary["n"] == 5 and summary["n_failed"] == 1
    again = run_cli(
        "eval",
        "score",
        "--benchmark",
        "mvbench",
        "--data-root",
        str(root),
        "--predictions",
        str(out / "mvbench" / "predictions.jsonl"),
        "--json",
        "--resamples",
        "0",
    )
    again.assert_success()
    assert (
        again.json() == summary
    )  # rescoring the saved responses gives the run's summary (no intervals asked)
    ids = sorted(r["id"] for r in lines(out / "mvbench" / "predictions.jsonl"))
    assert ids == [
        "action_sequence/0",
        "object_existence/0",
        "object_existence/1",
        "object_existence/2",
        "object_existence/2",
        "object_existence/3",
    ]

    changed = run_cli(*_run_args(model, root, out, "--fps", "2", "--max-frames", "4", "--max-pixels", "6000"))
    assert changed.exit_code != 0
    assert "video.fps: 1.0 in the run, 2.0 now" in changed.stderr


def test_two_runs_with_different_batching_give_the_same_predictions(
    tmp_path: Path, backend: Any, plugins: Any
) -> None:
    from videorl.rollout.hf import HFEngine

    root = write_mvbench(tmp_path / "mvbench", plain=5, clipped=2)
    task = load_task(plugins.benchmarks, "mvbench", root)
    engine = HFEngine(backend, backend.load_model(dtype=torch.float32))
    responses = []
    for name, workers, batch in (("a", 2, 3), ("b", 1, 1)):
        inputs = make_inputs(backend, tmp_path / f"cache-{name}", max_frames=4, max_pixels=6000)
        Evaluator(inputs, engine, GREEDY, workers=workers, batch_size=batch).run([task], tmp_path / name)
        responses.append(
            {r["id"]: r["response"] for r in lines(tmp_path / name / "mvbench" / "predictions.jsonl")}
        )
    assert len(responses[0]) == 7 and responses[0] == responses[1]
    assert len(set(responses[0].values())) >= 2  # the rows get different answers: a mix-up would show


def test_bad_inputs_name_the_directory_or_the_file_and_line(
    tmp_path: Path, tiny_model_dir: Callable[[str], Path], run_cli: Callable[..., Any]
) -> None:
    model = tiny_model_dir(FAMILY)
    result = run_cli(*_run_args(model, tmp_path / "nowhere", tmp_path / "run"))
    assert result.exit_code == 1
    assert f"data directory {tmp_path / 'nowhere'} does not exist" in result.stderr

    root = write_mvbench(tmp_path / "mvbench", plain=2)
    path = root / "json" / "object_existence.json"
    rows = json.loads(path.read_text())
    del rows[1]["question"]
    path.write_text(json.dumps(rows, indent=2) + "\n")
    # "[" is line 1, row 0 spans lines 2-11 (its candidates list takes 5 lines), row 1 opens on line 12
    result = run_cli(*_run_args(model, root, tmp_path / "run"))
    assert result.exit_code == 1
    assert f"{path}:12: field 'question' is missing" in result.stderr
    assert not (tmp_path / "run").exists()  # nothing was started


def test_begin_run_merges_benchmarks_and_refuses_other_settings(tmp_path: Path) -> None:
    base = {
        "model": {"path": "/m"},
        "sampling": {"temperature": 0.0},
        "benchmarks": {"a": {"data_root": "/a"}},
    }
    begin_run(tmp_path, base)
    begin_run(tmp_path, {**base, "pipeline": {"workers": 4}, "benchmarks": {"b": {"data_root": "/b"}}})
    settings = json.loads((tmp_path / "results.json").read_text())["settings"]
    assert settings["benchmarks"] == {"a": {"data_root": "/a"}, "b": {"data_root": "/b"}}
    assert settings["pipeline"] == {"workers": 4}
    with pytest.raises(Exception, match=r"sampling.temperature: 0.0 in the run, 0.7 now"):
        begin_run(tmp_path, {**base, "sampling": {"temperature": 0.7}})
    with pytest.raises(Exception, match=r"benchmarks.a.data_root: '/a' in the run, '/elsewhere' now"):
        begin_run(tmp_path, {**base, "benchmarks": {"a": {"data_root": "/elsewhere"}}})


# --- slow: a real kill, and the vLLM AsyncLLM engine ------------------------------------------------


@pytest.mark.slow
def test_a_killed_run_resumes_without_losing_or_repeating_a_sample(
    tmp_path: Path, tiny_model_dir: Callable[[str], Path], run_cli: Callable[..., Any]
) -> None:
    model = tiny_model_dir(FAMILY)
    total = 16
    root = write_mvbench(tmp_path / "mvbench", plain=total)
    out = tmp_path / "killed"
    args = _run_args(model, root, out, "--workers", "1", "--batch-size", "1")
    args[args.index("--max-tokens") + 1] = "24"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "videorl.cli", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    saved = out / "mvbench" / "predictions.jsonl"
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if saved.exists() and saved.read_bytes().count(b"\n") >= 3:
                break
            time.sleep(0.02)
        assert proc.poll() is None, (
            f"the run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
        )
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    done_before = saved.read_bytes().count(b"\n")
    assert 3 <= done_before < total

    run_cli(*args).assert_success()
    ids = [r["id"] for r in lines(saved)]
    assert sorted(ids) == sorted(f"object_existence/{i}" for i in range(total))  # every sample exactly once

    reference = tmp_path / "reference"
    run_cli(*_run_args(model, root, reference, "--max-tokens", "24")).assert_success()
    expected = {r["id"]: r["response"] for r in lines(reference / "mvbench" / "predictions.jsonl")}
    assert {r["id"]: r["response"] for r in lines(saved)} == expected
    summary = json.loads((out / "results.json").read_text())["benchmarks"]["mvbench"]
    assert summary["n"] == total and summary["n_failed"] == 0
    assert json.loads((out / "results.json").read_text())["timing"]["resumed"] == done_before


@pytest.mark.slow
def test_the_vllm_engine_gives_the_hf_predictions_with_chunked_prefill(
    tmp_path: Path, tiny_model_dir: Callable[[str], Path], run_cli: Callable[..., Any]
) -> None:
    pytest.importorskip("vllm")
    model = tiny_model_dir(FAMILY)
    root = write_mvbench(tmp_path / "mvbench", plain=4, clipped=2)
    run_cli(*_run_args(model, root, tmp_path / "hf")).assert_success()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    # 64 tokens per scheduler step: every prompt (over 100 tokens) is prefilled in chunks
    args = _run_args(
        model,
        root,
        tmp_path / "vllm",
        "--engine",
        "vllm",
        "--dtype",
        "float32",
        "--max-model-len",
        "1024",
        "--max-num-batched-tokens",
        "64",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "videorl.cli", *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    hf = {r["id"]: r["response"] for r in lines(tmp_path / "hf" / "mvbench" / "predictions.jsonl")}
    vllm = {r["id"]: r["response"] for r in lines(tmp_path / "vllm" / "mvbench" / "predictions.jsonl")}
    assert len(vllm) == 6 and vllm == hf
    settings = json.loads((tmp_path / "vllm" / "results.json").read_text())["settings"]
    assert settings["pipeline"]["engine_mode"] == "submit"
    assert settings["pipeline"]["engine"]["max_num_batched_tokens"] == 64
    assert settings["pipeline"]["engine"]["per_request_seed"] is False  # CPU + chunked prefill


def test_rows_sharing_a_video_build_its_cache_entry_once(tmp_path: Path, backend: Any, plugins: Any) -> None:
    root = write_mvbench(tmp_path / "mvbench", plain=2)
    rows = json.loads((root / "json" / "object_existence.json").read_text())
    rows += [
        {**rows[0], "question": "Again?"},
        {**rows[0], "question": "And again?"},
    ]  # three rows, one video
    (root / "json" / "object_existence.json").write_text(json.dumps(rows, indent=2))
    task = load_task(plugins.benchmarks, "mvbench", root)
    answers = {f"mvbench:{r.id}": "A" for r in task.rows}
    inputs = make_inputs(backend, tmp_path / "cache")
    Evaluator(inputs, ScriptedEngine(backend.tokenizer, answers), GREEDY, workers=3).run(
        [task], tmp_path / "run"
    )
    assert len(list(inputs.media.cache.entry_paths())) == 2
    summary = json.loads((tmp_path / "run" / "results.json").read_text())["benchmarks"]["mvbench"]
    assert summary["overall"] == 0.75  # truths A B A A, every answer A
