"""Benchmarks during training (``trainer.benchmarks``): passes, their files and metrics, resume, failures.

The benchmark is MVBench in its official layout (``json/object_existence.json``, ``video/...``) with a
few real H.264 clips; the model's answers come from a scripted engine (answers by sample id) where the
test needs to count them, and from the tiny policy itself in the training runs.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from videorl.backend import backend_for_model
from videorl.cluster.benchmark_rows import RowOutcome, WorkerBenchmarks, rows_request, rows_runner
from videorl.config import load_config
from videorl.errors import ConfigError, VideorlError
from videorl.eval import read_predictions, read_results
from videorl.media.synthetic import textured_frames, write_video
from videorl.plugins import load_plugins
from videorl.rollout import Completion, SamplingParams
from videorl.runs.history import read_metrics
from videorl.train.benchmarks import BenchmarkPasses, evaluator_runner, pass_dir

FAMILY = "qwen2_5_vl"
CANDIDATES = ["red", "green", "blue"]


def write_mvbench(root: Path, answers: Sequence[int], *, missing: Sequence[int] = ()) -> Path:
    """MVBench object_existence rows, row i answered ``CANDIDATES[answers[i]]`` (letter A, B or C); a
    row in ``missing`` names a video that is not there. 1 s clips at 10 fps, 64×80 px."""
    videos = root / "video" / "clevrer" / "video_validation"
    videos.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, answer in enumerate(answers):
        name = f"absent-{i}.mp4" if i in missing else f"clip-{i}.mp4"
        if i not in missing:
            write_video(videos / name, textured_frames(10, 64, 80, seed=i), fps=10.0)
        rows.append(
            {"video": name, "question": f"What colour is square {i}?", "candidates": CANDIDATES,
             "answer": CANDIDATES[answer]}
        )  # fmt: skip
    (root / "json").mkdir(parents=True, exist_ok=True)
    (root / "json" / "object_existence.json").write_text(json.dumps(rows), encoding="utf-8")
    return root


class ScriptedEngine:
    """Answers each prompt with the text ``answers[sample_id]``; counts the prompts it is asked."""

    def __init__(self, tokenizer: Any, answers: dict[str, str]) -> None:
        self.tokenizer, self.answers = tokenizer, answers
        self.asked: list[str] = []

    def generate(self, prompts: Sequence[Any], params: SamplingParams) -> list[list[Completion]]:
        out = []
        for p in prompts:
            self.asked.append(p.sample_id)
            tokens = self.tokenizer(self.answers[p.sample_id], add_special_tokens=False)["input_ids"]
            tokens.append(self.tokenizer.eos_token_id)
            out.append([Completion(tokens, [0.0] * len(tokens), "stop")])
        return out


class BrokenBenchmark:
    """A benchmark whose adapter raises while building the prompt of row ``bad``."""

    name = "broken"

    def load(self, data_root: Path) -> list[Any]:
        from videorl.benchmark import BenchmarkRow

        return [
            BenchmarkRow(id=i, problem=f"question {i}", answer="A", options=["x", "y"]) for i in ("ok", "bad")
        ]

    def build_prompt(self, row: Any, *, family: str | None, thinking: bool) -> str:
        if row.id == "bad":
            raise ValueError("this adapter cannot ask row bad")
        return row.problem

    def extract(self, row: Any, response: str) -> Any:
        return response.strip()[:1] or None

    def score(self, row: Any, prediction: Any) -> float:
        return float(prediction == row.answer)

    def aggregate(self, rows: list[Any], scores: list[float]) -> dict[str, Any]:
        return {"overall": sum(scores) / len(scores), "categories": {}}


@pytest.fixture(scope="module")
def plugins() -> Any:
    plugins = load_plugins()
    plugins.benchmarks.register("broken", BrokenBenchmark, origin="test")
    return plugins


@pytest.fixture(scope="module")
def model(tiny_model_dir: Callable[[str], Path]) -> Path:
    return tiny_model_dir(FAMILY)


@pytest.fixture(scope="module")
def backend(model: Path, plugins: Any) -> Any:
    return backend_for_model(model, plugins.model_backends)


@pytest.fixture(scope="module")
def mvbench(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # answers A, B, C, A: the scripted engine below gets rows 0, 1 and 3 right
    return write_mvbench(tmp_path_factory.mktemp("mvbench"), [0, 1, 2, 0])


RIGHT_3_OF_4 = {f"mvbench:object_existence/{i}": f"({letter})" for i, letter in enumerate("ABAA")}


def config(
    run: Path, model: Path, *benchmarks: str, steps: int = 5, strict: bool = False, extra: Sequence[str] = ()
) -> Any:
    return load_config(
        None,
        [
            f"output_dir={run}", f"model.path={model}", "data.train_files=[unused.jsonl]",
            "data.video_fps=2", "data.video_max_frames=2", "data.video_max_pixels=3136",
            f"trainer.max_steps={steps}", f"trainer.benchmarks=[{', '.join(benchmarks)}]",
            f"trainer.benchmarks_strict={str(strict).lower()}", *extra,
        ],
    )  # fmt: skip


def test_due_every_n_steps_and_after_the_last(
    tmp_path: Path, model: Path, plugins: Any, backend: Any
) -> None:
    c = config(
        tmp_path,
        model,
        f"{{name: mvbench, data_root: {tmp_path}, every: 2}}",
        f"{{name: broken, data_root: {tmp_path}}}",
    )
    passes = BenchmarkPasses(c, plugins, backend)
    assert [passes.due(s, 5) for s in range(1, 6)] == [
        [],
        ["mvbench"],
        [],
        ["mvbench"],
        ["mvbench", "broken"],
    ]
    evaluation = passes.evaluation(evaluator_runner(None))
    assert evaluation.name == "benchmarks"
    assert [evaluation.due(s, 5) for s in range(1, 6)] == [False, True, False, True, True]


def test_a_pass_writes_eval_files_and_logs_bench_metrics(
    tmp_path: Path, model: Path, plugins: Any, backend: Any, mvbench: Path
) -> None:
    run = tmp_path / "run"
    passes = BenchmarkPasses(
        config(run, model, f"{{name: mvbench, data_root: {mvbench}, every: 2}}"), plugins, backend
    )
    engine = ScriptedEngine(backend.processor.tokenizer, RIGHT_3_OF_4)
    assert passes.run(1, evaluator_runner(engine)) == {}
    metrics = passes.run(2, evaluator_runner(engine))
    assert metrics["bench/mvbench/overall"] == pytest.approx(0.75)  # one task: its accuracy, 3 of 4
    assert metrics["bench/mvbench/accuracy (pooled)"] == pytest.approx(0.75)
    assert metrics["bench/mvbench/task/object_existence"] == pytest.approx(0.75)
    assert metrics["bench/mvbench/failed"] == 0.0
    directory = pass_dir(run, 2, "mvbench")
    assert directory == run / "benchmarks" / "step_000002" / "mvbench"
    results = read_results(directory)
    assert results["benchmarks"]["mvbench"]["overall"] == pytest.approx(0.75)
    assert results["settings"]["training"]["step"] == 2
    # the run and step, not a checkpoint: the pass runs before the step's save (which may not happen)
    assert results["settings"]["model"]["path"] == str(run.resolve())
    assert results["settings"]["training"] == {
        "output_dir": str(run.absolute()), "step": 2, "resumed_from": 0, "continues_from": 0
    }  # fmt: skip
    assert results["settings"]["video"]["fps"] == 2.0  # the run's budget (data.video_fps)
    predictions = read_predictions(directory / "mvbench" / "predictions.jsonl")
    assert {i: p.record["prediction"] for i, p in predictions.items()} == {
        "object_existence/0": "A", "object_existence/1": "B", "object_existence/2": "A",
        "object_existence/3": "A"
    }  # fmt: skip
    assert sorted(engine.asked) == sorted(RIGHT_3_OF_4)


def test_resume_skips_a_finished_pass_and_finishes_an_interrupted_one(
    tmp_path: Path, model: Path, plugins: Any, backend: Any, mvbench: Path
) -> None:
    run = tmp_path / "run"
    c = config(run, model, f"{{name: mvbench, data_root: {mvbench}, every: 2}}")
    first = ScriptedEngine(backend.processor.tokenizer, RIGHT_3_OF_4)
    done = BenchmarkPasses(c, plugins, backend).run(2, evaluator_runner(first))
    # a resumed run: the pass of step 2 is read back, nothing is asked again
    again = ScriptedEngine(backend.processor.tokenizer, RIGHT_3_OF_4)
    resumed = BenchmarkPasses(c, plugins, backend).run(2, evaluator_runner(again))
    assert again.asked == []
    assert resumed == done
    # ... unless the run now asks for other settings: the pass says which, rather than read back stale scores
    changed = config(
        run, model, f"{{name: mvbench, data_root: {mvbench}, every: 2, max_tokens: 5}}", strict=True
    )
    with pytest.raises(
        VideorlError, match=r"benchmark mvbench failed.*sampling\.max_tokens: 1024 in the run, 5 now"
    ):
        BenchmarkPasses(changed, plugins, backend).run(2, evaluator_runner(again))
    assert again.asked == []
    # step 4's pass killed after two rows: the predictions file holds them, results.json no summary
    step4 = pass_dir(run, 4, "mvbench")
    BenchmarkPasses(c, plugins, backend).run(4, evaluator_runner(first))
    path = step4 / "mvbench" / "predictions.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:2]))
    results = json.loads((step4 / "results.json").read_text())
    del results["benchmarks"]["mvbench"]
    (step4 / "results.json").write_text(json.dumps(results))
    kept = [json.loads(line)["id"] for line in path.read_text().splitlines()]
    third = ScriptedEngine(backend.processor.tokenizer, RIGHT_3_OF_4)
    metrics = BenchmarkPasses(c, plugins, backend).run(4, evaluator_runner(third))
    assert sorted(third.asked) == sorted(
        f"mvbench:{i}" for i in {f"object_existence/{n}" for n in range(4)} - set(kept)
    )
    assert metrics["bench/mvbench/overall"] == pytest.approx(0.75)


def test_a_run_resumed_elsewhere_evaluates_the_pass_again(
    tmp_path: Path, model: Path, plugins: Any, backend: Any, mvbench: Path
) -> None:
    """A pass is read back (or resumed by row id) by a run resumed from the checkpoint its weights
    continued from; a run resumed from another checkpoint may hold other weights: it evaluates anew."""
    run = tmp_path / "run"
    spec = f"{{name: mvbench, data_root: {mvbench}, every: 2}}"
    c = config(run, model, spec, extra=["trainer.save_every=3"])
    first = ScriptedEngine(backend.processor.tokenizer, RIGHT_3_OF_4)
    done = BenchmarkPasses(c, plugins, backend).run(4, evaluator_runner(first))
    step4 = pass_dir(run, 4, "mvbench")
    assert read_results(step4)["settings"]["training"]["continues_from"] == 3  # saved after step 3
    # killed after step 4's pass, resumed from step 3's checkpoint: the same weights at step 4
    again = ScriptedEngine(backend.processor.tokenizer, RIGHT_3_OF_4)
    assert BenchmarkPasses(c, plugins, backend, resumed_from=3).run(4, evaluator_runner(again)) == done
    assert again.asked == []
    # resumed from step 1's checkpoint (e.g. with other settings): evaluated again, the earlier pass kept
    other = ScriptedEngine(backend.processor.tokenizer, RIGHT_3_OF_4)
    BenchmarkPasses(c, plugins, backend, resumed_from=1).run(4, evaluator_runner(other))
    assert sorted(other.asked) == sorted(first.asked) and len(other.asked) == 4
    aside = step4.with_name("mvbench.earlier-1")
    assert read_results(aside)["settings"]["training"]["resumed_from"] == 0
    assert read_results(step4)["settings"]["training"] == {
        "output_dir": str(run.absolute()), "step": 4, "resumed_from": 1, "continues_from": 3
    }  # fmt: skip


def test_failures_are_logged_naming_benchmark_and_row_unless_strict(
    tmp_path: Path, model: Path, plugins: Any, backend: Any, mvbench: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = write_mvbench(tmp_path / "holey", [0, 1], missing=[1])
    specs = (
        f"{{name: broken, data_root: {tmp_path}}}",
        f"{{name: mvbench, data_root: {missing}}}",
    )
    engine = ScriptedEngine(
        backend.processor.tokenizer, {"broken:ok": "A", "mvbench:object_existence/0": "(A)"}
    )
    with caplog.at_level(logging.ERROR, logger="videorl.train.benchmarks"):
        metrics = BenchmarkPasses(config(tmp_path / "a", model, *specs), plugins, backend).run(
            5, evaluator_runner(engine)
        )
    assert metrics["bench/broken/overall"] == 0.5 and metrics["bench/broken/failed"] == 1.0
    assert metrics["bench/mvbench/overall"] == 0.5 and metrics["bench/mvbench/failed"] == 1.0
    logged = caplog.text
    assert (
        "benchmark broken: 1 of 2 rows failed" in logged
        and "bad: ValueError: this adapter cannot ask row bad" in logged
    )
    assert "benchmark mvbench: 1 of 2 rows failed" in logged and "object_existence/1:" in logged

    with pytest.raises(
        VideorlError, match=r"step 5: benchmark broken: 1 of 2 rows failed.*bad: ValueError.*strict"
    ):
        BenchmarkPasses(config(tmp_path / "b", model, *specs, strict=True), plugins, backend).run(
            5, evaluator_runner(engine)
        )


def test_a_benchmark_that_cannot_load_is_skipped_or_stops_a_strict_run(
    tmp_path: Path, model: Path, plugins: Any, backend: Any, mvbench: Path, caplog: pytest.LogCaptureFixture
) -> None:
    specs = (f"{{name: mvbench, data_root: {tmp_path / 'nowhere'}}}",)
    with pytest.raises(ConfigError, match=r"trainer.benchmarks: mvbench: .*nowhere"):
        BenchmarkPasses(config(tmp_path / "a", model, specs[0], strict=True), plugins, backend)
    with caplog.at_level(logging.ERROR, logger="videorl.train.benchmarks"):
        passes = BenchmarkPasses(config(tmp_path / "b", model, specs[0]), plugins, backend)
        metrics = passes.run(5, evaluator_runner(ScriptedEngine(backend.processor.tokenizer, {})))
    assert metrics == {}
    assert "step 5: benchmark mvbench skipped" in caplog.text and "nowhere" in caplog.text


def test_a_pass_raising_is_logged_or_raised_when_strict(
    tmp_path: Path, model: Path, plugins: Any, backend: Any, mvbench: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def crash(*args: Any) -> Any:
        raise RuntimeError("the engine died")

    spec = f"{{name: mvbench, data_root: {mvbench}}}"
    with caplog.at_level(logging.ERROR, logger="videorl.train.benchmarks"):
        assert BenchmarkPasses(config(tmp_path / "a", model, spec), plugins, backend).run(5, crash) == {}
    assert (
        "step 5: benchmark mvbench failed, training goes on" in caplog.text
        and "the engine died" in caplog.text
    )
    with pytest.raises(
        VideorlError, match=r"step 5: benchmark mvbench failed .*RuntimeError: the engine died"
    ):
        BenchmarkPasses(config(tmp_path / "b", model, spec, strict=True), plugins, backend).run(5, crash)


def test_the_ray_path_writes_what_the_evaluator_writes(
    tmp_path: Path, model: Path, plugins: Any, backend: Any, mvbench: Path
) -> None:
    """Rows sent to a worker (ids and token ids over the wire) give the evaluator's very records."""
    from videorl.cluster import wire

    missing = write_mvbench(tmp_path / "holey", [0, 1, 2, 0, 1], missing=[2])
    spec = f"{{name: mvbench, data_root: {missing}}}"
    answers = {f"mvbench:object_existence/{i}": f"({letter})" for i, letter in enumerate("ABCBB")}

    local = BenchmarkPasses(config(tmp_path / "local", model, spec), plugins, backend)
    local.run(5, evaluator_runner(ScriptedEngine(backend.processor.tokenizer, answers)))

    c = config(tmp_path / "ray", model, spec)
    worker, engine = (
        WorkerBenchmarks(c, plugins, backend),
        ScriptedEngine(backend.processor.tokenizer, answers),
    )

    def generate_rows(task: Any, rows: Any, sampling: Any, thinking: bool) -> list[RowOutcome]:
        message = wire.loads(wire.dumps(rows_request(task, rows, sampling, thinking)))
        reply = wire.loads(wire.dumps(worker.generate(engine, message)))
        return [RowOutcome.from_wire(r) for r in reply]

    metrics = BenchmarkPasses(c, plugins, backend).run(5, rows_runner(generate_rows))
    assert metrics["bench/mvbench/overall"] == pytest.approx(0.6)  # rows 0, 1, 3 right; 2 has no video
    a, b = (pass_dir(tmp_path / r, 5, "mvbench") / "mvbench" for r in ("local", "ray"))
    assert (a / "scores.jsonl").read_text() == (b / "scores.jsonl").read_text()
    by_id = [{i: p.record for i, p in read_predictions(d / "predictions.jsonl").items()} for d in (a, b)]
    assert by_id[0] == by_id[1]
    assert by_id[1]["object_existence/2"]["stage"] == "load"


@pytest.mark.parametrize(
    ("workers", "colocated", "tp", "hosts"), [(3, False, 1, [0, 1, 2]), (4, True, 2, [0, 2])]
)
def test_on_ray_the_rows_are_shared_among_the_workers_hosting_an_engine(
    tmp_path: Path, model: Path, plugins: Any, backend: Any, mvbench: Path,
    workers: int, colocated: bool, tp: int, hosts: list[int],
) -> None:  # fmt: skip
    """One request per rollout worker, rows only to those hosting an engine (a tensor-parallel group's
    leader when colocated); the answers come back in row order."""
    from types import SimpleNamespace

    from videorl.cluster import wire
    from videorl.cluster.benchmark_rows import ray_evaluations

    c = config(tmp_path / "run", model, f"{{name: mvbench, data_root: {mvbench}}}",
               extra=[f"rollout.engine_options={{tensor_parallel_size: {tp}}}"])  # fmt: skip
    worker, engine = (
        WorkerBenchmarks(c, plugins, backend),
        ScriptedEngine(backend.processor.tokenizer, RIGHT_3_OF_4),
    )
    calls: list[list[list[str]]] = []

    class Controller:
        rollout_worker_count = workers
        cluster = SimpleNamespace(colocated=colocated, benchmarkers=[])

        def call_rollouts(self, stage: str, method: str, requests: Sequence[Any]) -> list[Any]:
            assert (stage, method, len(requests)) == ("benchmark mvbench", "generate_benchmark", workers)
            calls.append([r.get("ids", []) for r in requests])
            return [
                wire.loads(wire.dumps(worker.generate(engine, wire.loads(wire.dumps(r))))) for r in requests
            ]

    (evaluation,) = ray_evaluations(BenchmarkPasses(c, plugins, backend), Controller())  # type: ignore[arg-type]
    assert evaluation(5)["bench/mvbench/overall"] == pytest.approx(0.75)
    (ids,) = calls
    assert [i for i, share in enumerate(ids) if share] == hosts
    assert sorted(i for share in ids for i in share) == [f"object_existence/{n}" for n in range(4)]


def keep_weights(path: Path | str, plan: dict[str, Any]) -> None:
    """What the first benchmark worker writes (``Worker.keep_weights``), for a one-tensor model."""
    import torch

    from videorl.cluster.benchmark_group import plan_metadata
    from videorl.runs.tensors import write_tensor_file

    # the file Worker.keep_weights writes from the buckets it was handed
    write_tensor_file(str(path), {"w": torch.full((2,), float(plan["version"]))}, plan_metadata(plan))


class BenchmarkWorkers:
    """The benchmark workers of a Ray run without Ray: one worker answering with a scripted engine,
    each pass's rows held until the test opens its step's gate; records what the worker was sent."""

    def __init__(self, c: Any, plugins: Any, backend: Any) -> None:
        import threading

        from videorl.cluster.runtime import WorkerHandle

        self.benchmarkers = [WorkerHandle("benchmark-0", ["benchmark"], None)]
        self.worker = WorkerBenchmarks(c, plugins, backend)
        self.engine = ScriptedEngine(backend.processor.tokenizer, RIGHT_3_OF_4)
        self.gates: dict[int, threading.Event] = {}
        self.sent: list[tuple[str, Any]] = []

    def gate(self, step: int) -> Any:
        import threading

        return self.gates.setdefault(step, threading.Event())

    def call(self, stage: str, step: int, calls: list[tuple[Any, str, tuple[Any, ...]]]) -> list[Any]:
        from videorl.cluster import wire

        out: list[Any] = []
        for _, method, args in calls:
            self.sent.append((method, args[0] if method != "generate_benchmark" else step))
            if method == "keep_weights":
                _, path, plan = args
                keep_weights(path, plan)
                out.append(None)
            elif method in ("load_weights", "load_weights_file"):
                out.append(0.0)
            else:
                assert method == "generate_benchmark"
                assert self.gate(step).wait(30), f"the pass of step {step} was never let through"
                request = wire.loads(args[0])
                out.append(wire.dumps(self.worker.generate(self.engine, request)))
        return out


class PublishingController:
    """What the group asks of the Ray controller: the current step's weights, published."""

    def __init__(self, cluster: BenchmarkWorkers) -> None:
        self.cluster, self.step = cluster, 0

    def current_weights(self) -> Any:
        from videorl.cluster.weights import Published

        return Published(self.step, f"weights of step {self.step}", 100.0)


def _group(run: Path, model: Path, plugins: Any, backend: Any, spec: str, *, start: int = 0,
           extra: Sequence[str] = ()) -> tuple[Any, BenchmarkWorkers, PublishingController]:  # fmt: skip
    from videorl.cluster.benchmark_group import BenchmarkGroup

    c = config(run, model, spec, steps=6, extra=["ray.benchmark_workers=1", *extra])
    workers = BenchmarkWorkers(c, plugins, backend)
    controller = PublishingController(workers)
    passes = BenchmarkPasses(c, plugins, backend, resumed_from=start)
    return BenchmarkGroup(passes, controller), workers, controller  # type: ignore[arg-type]


def _wait_done(group: Any) -> None:
    import time

    deadline = time.monotonic() + 30
    while not group._job.future.done():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_benchmark_workers_score_beside_training_and_report_each_pass_once(
    tmp_path: Path, model: Path, plugins: Any, backend: Any, mvbench: Path
) -> None:
    """every 2 of 6 steps: the pass of step 2 runs while steps 3 and 4 train and is logged at step 4;
    step 4's is waited for at step 5 (before the last pass, which step 6 waits for); each row holds one."""
    run = tmp_path / "run"
    group, workers, controller = _group(
        run, model, plugins, backend, f"{{name: mvbench, data_root: {mvbench}, every: 2}}"
    )
    rows: dict[int, dict[str, float]] = {}

    def step(s: int) -> None:
        controller.step = s
        if group.due(s, 6):
            rows[s] = group(s)

    step(1)
    step(2)  # starts step 2's pass and returns at once: its rows wait at the gate
    assert rows == {2: {}}
    weights = run / "benchmarks" / "step_000002" / "weights.safetensors"
    assert group._job.kept.wait(10)
    from videorl.cluster.benchmark_group import read_plan

    assert read_plan(weights) == {  # kept before any row is asked, with what is to be done with them
        "version": 2, "benchmarks": ["mvbench"],
        "training": {"output_dir": str(run.absolute()), "step": 2, "resumed_from": 0, "continues_from": 0},
    }  # fmt: skip
    step(3)
    assert 3 not in rows  # nothing arrived, nothing due: the loop does not stop here
    workers.gate(2).set()
    _wait_done(group)
    assert not weights.exists()  # removed with its job
    step(4)  # step 2's results arrive; step 4's pass starts
    assert rows[4]["bench/mvbench/step"] == 2 and rows[4]["bench/mvbench/overall"] == pytest.approx(0.75)
    assert rows[4]["bench/mvbench/seconds"] > 0
    import threading

    threading.Timer(0.3, workers.gate(4).set).start()
    step(5)  # drained before the last pass: step 4's results, waited for
    assert rows[5]["bench/mvbench/step"] == 4
    workers.gate(6).set()
    step(6)  # the last pass: waited for at its step
    assert rows[6]["bench/mvbench/step"] == 6
    assert sorted(rows) == [2, 4, 5, 6]
    assert [m for m, _ in workers.sent if m != "generate_benchmark"] == ["keep_weights", "load_weights"] * 3
    assert [a for m, a in workers.sent if m == "load_weights"] == [f"weights of step {s}" for s in (2, 4, 6)]
    for s in (2, 4, 6):  # each an evaluation run directory, as between steps
        assert read_results(pass_dir(run, s, "mvbench"))["benchmarks"]["mvbench"]["overall"] == 0.75


def test_every_step_passes_are_waited_for_and_a_save_waits_for_the_kept_weights(
    tmp_path: Path, model: Path, plugins: Any, backend: Any, mvbench: Path
) -> None:
    """every 1: every pass is in the last run of due steps, so each is waited for at its step (one
    result a row); with every 3 and a checkpoint each step, the step after a pass starts waits only
    for its weights to be on disk."""
    group, workers, controller = _group(
        tmp_path / "a", model, plugins, backend, f"{{name: mvbench, data_root: {mvbench}, every: 1}}"
    )
    for s in range(1, 7):
        workers.gate(s).set()
        controller.step = s
        assert group.due(s, 6)
        assert group(s)["bench/mvbench/step"] == s

    group, workers, controller = _group(
        tmp_path / "b", model, plugins, backend, f"{{name: mvbench, data_root: {mvbench}, every: 3}}",
        extra=["trainer.save_every=1"],
    )  # fmt: skip
    controller.step = 3
    assert group(3) == {}
    assert group._job.kept.is_set()  # waited for before the step's checkpoint
    assert not group._job.future.done()  # but not for the pass
    workers.gate(3).set()
    workers.gate(6).set()


def test_a_resumed_run_finishes_an_interrupted_pass_with_its_kept_weights(
    tmp_path: Path, model: Path, plugins: Any, backend: Any, mvbench: Path
) -> None:
    """Killed while step 2's pass ran (two rows answered, its weights kept), resumed from step 2's
    checkpoint: the pass is finished with the kept weights, only the other rows asked, logged once."""
    run = tmp_path / "run"
    spec = f"{{name: mvbench, data_root: {mvbench}, every: 2}}"
    group, workers, controller = _group(run, model, plugins, backend, spec)
    controller.step = 2
    workers.gate(2).set()
    group(2)
    _wait_done(group)
    directory = pass_dir(run, 2, "mvbench")
    done = _records(directory)
    # as it was while the pass ran: two rows answered, no summary, the weights kept
    predictions = directory / "mvbench" / "predictions.jsonl"
    predictions.write_text("".join(predictions.read_text().splitlines(keepends=True)[:2]))
    results = json.loads((directory / "results.json").read_text())
    del results["benchmarks"]["mvbench"]
    (directory / "results.json").write_text(json.dumps(results))
    kept = directory.parent / "weights.safetensors"
    training = results["settings"]["training"]
    keep_weights(kept, {"version": 2, "benchmarks": ["mvbench"], "training": training})
    partial = directory.parent / ".weights.safetensors.tmp-123-abc.tmp"  # a write killed midway
    partial.write_bytes(b"\0" * 8)
    stale = run / "benchmarks" / "step_000003" / "weights.safetensors"  # a step the run trains again
    keep_weights(stale, {"version": 3, "benchmarks": ["mvbench"], "training": training})

    group, workers, controller = _group(run, model, plugins, backend, spec, start=2)
    assert not group.due(3, 6) and group.due(5, 6)  # running: waited for before the last pass only
    workers.gate(2).set()
    _wait_done(group)
    assert ("load_weights_file", str(kept)) in workers.sent
    assert not kept.exists() and not stale.exists() and not partial.exists()
    assert not stale.parent.exists()  # a step's folder that held nothing but its kept weights
    assert len(workers.engine.asked) == 2  # the two rows not answered before
    assert _records(directory) == done
    controller.step = 3
    assert group.due(3, 6)
    row = group(3)
    assert row["bench/mvbench/step"] == 2 and row["bench/mvbench/overall"] == pytest.approx(0.75)
    assert group._queued == [] and group._job is None and not group.due(5, 6)

    # resumed again from step 2 with metrics.jsonl holding rows 1-2 only: step 2's results were logged
    # in row 3, which the resumed run drops, so they are logged again; with row 3 kept, they are not
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    group, workers, _ = _group(run, model, plugins, backend, spec, start=2)
    assert [(name, m["bench/mvbench/step"]) for name, m in group._queued] == [("mvbench", 2.0)]
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"step": 3, "bench/mvbench/step": 2}\n')
    group, workers, _ = _group(run, model, plugins, backend, spec, start=3)
    assert group._queued == [] and group._job is None and workers.engine.asked == []
    # a row written before passes carried bench/NAME/step reports the pass of its own step
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, "bench/mvbench/overall": 0.75}\n')
    group, workers, _ = _group(run, model, plugins, backend, spec, start=2)
    assert group._queued == []


def test_weights_kept_before_a_pass_began_are_used_for_the_passes_they_were_kept_for(
    tmp_path: Path, model: Path, plugins: Any, backend: Any, mvbench: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Killed between keeping the weights and the first row: no pass directory exists, the kept file's
    plan says which passes to run (one no longer configured is named and left), recording the
    weights' own provenance; a damaged file is removed, naming it."""
    run = tmp_path / "run"
    spec = f"{{name: mvbench, data_root: {mvbench}, every: 2}}"
    training = {"output_dir": str(run.absolute()), "step": 2, "resumed_from": 0, "continues_from": 0}
    kept = run / "benchmarks" / "step_000002" / "weights.safetensors"
    keep_weights(kept, {"version": 2, "benchmarks": ["mvbench", "videomme"], "training": training})
    damaged = run / "benchmarks" / "step_000001" / "weights.safetensors"
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"not safetensors")
    with caplog.at_level(logging.WARNING, logger="videorl.cluster.benchmark_group"):
        group, workers, controller = _group(run, model, plugins, backend, spec, start=2)
    assert "videomme are no longer in trainer.benchmarks" in caplog.text
    assert f"{damaged} cannot be read" in caplog.text and not damaged.exists()
    workers.gate(2).set()
    _wait_done(group)
    assert len(workers.engine.asked) == 4 and not kept.exists()
    assert read_results(pass_dir(run, 2, "mvbench"))["settings"]["training"] == training
    controller.step = 3
    assert group(3)["bench/mvbench/step"] == 2


def test_videorl_plot_draws_each_benchmarks_overall() -> None:
    from videorl.runs.plot import curves, render

    rows = [
        {"step": 1, "reward/overall": 0.1},
        {"step": 2, "reward/overall": 0.2, "bench/mvbench/overall": 0.25, "bench/mvbench/task/x": 0.5},
        {"step": 4, "bench/mvbench/overall": 0.5, "bench/videomme/overall": 0.4, "time/benchmarks": 3.0},
        # from benchmark workers: step 5's pass, logged in row 6
        {"step": 6, "bench/mvbench/overall": 0.75, "bench/mvbench/step": 5.0},
    ]
    data = curves(rows)
    assert data["benchmarks"] == {"mvbench": ([2, 4, 5], [0.25, 0.5, 0.75]), "videomme": ([4], [0.4])}
    assert data["reward"] == {"overall": ([1, 2], [0.1, 0.2])}
    assert render(data, "run")[:8] == b"\x89PNG\r\n\x1a\n"


# --- through the command line, on the demo task ----------------------------------------------------

BROKEN_PLUGIN = '''
from videorl.api import BenchmarkRow, hookimpl


class Broken:
    """Row "bad" cannot be asked: its adapter raises."""

    name = "broken"

    def load(self, data_root):
        return [BenchmarkRow(id=i, problem="Which?", answer="A", options=["x", "y"]) for i in ("ok", "bad")]

    def build_prompt(self, row, *, family, thinking):
        if row.id == "bad":
            raise ValueError("this adapter cannot ask row bad")
        return row.problem

    def extract(self, row, response):
        return None

    def score(self, row, prediction):
        return 0.0

    def aggregate(self, rows, scores):
        return {"overall": sum(scores) / len(scores), "categories": {}}


@hookimpl
def register_benchmarks(register):
    register("broken", Broken)
'''


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    from videorl import demo

    out = tmp_path_factory.mktemp("task")
    model, train, val = demo.prepare(out, load_plugins(), family=FAMILY, seed=0, train=8, val=4)
    (out / "empty.yaml").write_text("")
    return out, model, train, val


def _train(
    task: Any,
    run: Path,
    steps: int,
    *extra: str,
    launcher: str = "one",
    ray_workers: int = 2,
    env: dict[str, str] | None = None,
    wait: bool = True,
) -> Any:
    """``videorl train`` on the demo task in one process (``one``), two torchrun ranks or
    ``ray_workers`` Ray actor workers (colocated); without ``wait`` the process started, in a session
    of its own (a local Ray runtime with it)."""
    from videorl import demo

    out, model, train, val = task
    overrides = [
        *demo.demo_overrides(out, model, train, val, steps=steps, seed=3, engine="hf"),
        f"output_dir={run}", "data.rollout_batch_size=2", "actor.global_batch_size=2", "rollout.n=4",
        "trainer.progress_bar=false", "trainer.val_every=0", "trainer.save_every=2", *extra,
    ]  # fmt: skip
    command = ["videorl.cli", "train", str(out / "empty.yaml"), *overrides]
    if launcher == "ray":
        command += ["--ray", f"ray.actor_workers={ray_workers}", "ray.placement=colocated"]
    elif launcher == "torchrun":
        command = ["torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", *command]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    if not wait:
        return subprocess.Popen(
            [sys.executable, "-m", *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=environment, start_new_session=True,
        )  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", *command], capture_output=True, text=True, env=environment, timeout=600
    )


def _records(directory: Path, name: str = "mvbench") -> dict[str, dict[str, Any]]:
    return {i: p.record for i, p in read_predictions(directory / name / "predictions.jsonl").items()}


@pytest.mark.slow
def test_training_scores_a_benchmark_every_2_steps_as_eval_run_does_and_resumes(
    task: Any, mvbench: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    bench = f"trainer.benchmarks=[{{name: mvbench, data_root: {mvbench}, every: 2, max_tokens: 8}}]"
    lr = "optim.lr=1e-6"  # the answers stay random texts (the demo's rate teaches one within 4 steps)
    done = _train(task, run, 4, bench, lr)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = read_metrics(run / "metrics.jsonl")
    assert [("bench/mvbench/overall" in r, "time/benchmarks" in r) for r in rows] == [
        (False, False), (True, True), (False, False), (True, True)
    ]  # fmt: skip
    for r in rows[1::2]:
        assert {k for k in r if k.startswith("bench/")} == {
            "bench/mvbench/overall", "bench/mvbench/accuracy (pooled)", "bench/mvbench/task/object_existence",
            "bench/mvbench/failed", "bench/mvbench/step",
        }  # fmt: skip
        assert r["bench/mvbench/step"] == r["step"]  # between steps: the row of the step it scored
    step2, step4 = pass_dir(run, 2, "mvbench"), pass_dir(run, 4, "mvbench")
    results = read_results(step4)
    assert rows[3]["bench/mvbench/overall"] == results["benchmarks"]["mvbench"]["overall"]
    assert results["settings"]["training"]["step"] == 4 and results["settings"]["sampling"]["max_tokens"] == 8
    in_loop = _records(step4)
    assert len(in_loop) == 4 and sum(r["num_output_tokens"] for r in in_loop.values()) > 12

    # videorl eval run on the step-4 checkpoint, at the run's budget: the very same answers and scores
    from videorl import demo

    budget = [f"--fps={demo.FPS}", f"--max-frames={demo.FRAMES}", f"--min-pixels={demo.SIDE**2}",
              f"--max-pixels={demo.SIDE**2}"]  # fmt: skip
    separate = tmp_path / "eval"
    evaluated = subprocess.run(
        [sys.executable, "-m", "videorl.cli", "eval", "run", "--model",
         str(run / "checkpoints" / "step_000004"),
         "--benchmark", f"mvbench={mvbench}", "--out", str(separate), "--max-tokens", "8", "--quiet",
         *budget],
        capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600,
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert _records(separate) == in_loop
    assert (separate / "mvbench" / "scores.jsonl").read_text() == (
        step4 / "mvbench" / "scores.jsonl"
    ).read_text()

    # killed after step 4's pass, before its checkpoint: resumed from step 2, the pass is not run again
    predictions = step4 / "mvbench" / "predictions.jsonl"
    before, step2_before = predictions.read_bytes(), (step2 / "mvbench" / "predictions.jsonl").read_bytes()
    resumed = _train(task, run, 4, bench, lr, f"trainer.resume={run / 'checkpoints' / 'step_000002'}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert predictions.read_bytes() == before
    assert (step2 / "mvbench" / "predictions.jsonl").read_bytes() == step2_before
    again = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in again] == [1, 2, 3, 4]
    assert again[3]["bench/mvbench/overall"] == rows[3]["bench/mvbench/overall"]

    # killed during step 4's pass with two rows answered: the resumed pass asks only the other two
    lines = before.decode().splitlines(keepends=True)
    predictions.write_text("".join(lines[:2]))
    data = json.loads((step4 / "results.json").read_text())
    del data["benchmarks"]["mvbench"]
    (step4 / "results.json").write_text(json.dumps(data))
    resumed = _train(task, run, 4, bench, lr, f"trainer.resume={run / 'checkpoints' / 'step_000002'}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = predictions.read_text().splitlines(keepends=True)
    assert len(after) == 4 and after[:2] == lines[:2]  # nothing asked twice
    assert _records(step4) == in_loop  # the same weights again (CPU, same checkpoint and seeds)
    assert read_results(step4)["benchmarks"]["mvbench"]["overall"] == rows[3]["bench/mvbench/overall"]


@pytest.mark.slow
def test_a_benchmark_that_raises_is_reported_and_stops_only_a_strict_run(task: Any, tmp_path: Path) -> None:
    plugin = tmp_path / "broken_bench.py"
    plugin.write_text(BROKEN_PLUGIN)
    common = (f"plugins=[{plugin}]", f"trainer.benchmarks=[{{name: broken, data_root: {tmp_path}}}]")
    lenient = _train(task, tmp_path / "lenient", 1, *common)
    assert lenient.returncode == 0, lenient.stderr[-3000:]
    assert "benchmark broken: 1 of 2 rows failed" in lenient.stderr
    assert "bad: ValueError: this adapter cannot ask row bad" in lenient.stderr
    (row,) = read_metrics(tmp_path / "lenient" / "metrics.jsonl")
    assert row["bench/broken/failed"] == 1.0 and row["bench/broken/overall"] == 0.0

    strict = _train(task, tmp_path / "strict", 1, *common, "trainer.benchmarks_strict=true")
    assert strict.returncode != 0
    assert (
        "step 1: benchmark broken: 1 of 2 rows failed" in strict.stderr
        and "benchmarks_strict" in strict.stderr
    )
    assert "bad: ValueError: this adapter cannot ask row bad" in strict.stderr


@pytest.mark.slow
def test_on_ray_the_rollout_workers_answer_the_rows_as_torchrun_ranks_do(
    task: Any, mvbench: Path, tmp_path: Path
) -> None:
    """Two Ray actor workers train as two torchrun ranks do: at the same step, the same weights answer
    the rows the same, whether rank 0's engine answers them all or the two rollout workers share them."""
    bench = f"trainer.benchmarks=[{{name: mvbench, data_root: {mvbench}, max_tokens: 8}}]"
    local, ray = tmp_path / "torchrun", tmp_path / "ray"
    for run, launcher in ((local, "torchrun"), (ray, "ray")):
        done = _train(task, run, 1, bench, launcher=launcher)  # the pass after the one update
        assert done.returncode == 0, done.stderr[-3000:]
    assert _records(pass_dir(ray, 1, "mvbench")) == _records(pass_dir(local, 1, "mvbench"))
    (mine,), (theirs,) = read_metrics(ray / "metrics.jsonl"), read_metrics(local / "metrics.jsonl")
    assert mine["bench/mvbench/overall"] == theirs["bench/mvbench/overall"] and "time/benchmarks" in mine


SLOW_PLUGIN = '''
import json
import os
import time

from videorl.api import BenchmarkRow, hookimpl

ROWS = 20


class Slow:
    """Text rows whose prompts take SLOW_S seconds each to build; each ask is logged with its pid."""

    name = "slow"

    def load(self, data_root):
        return [BenchmarkRow(id=f"q{i}", problem=f"Which letter comes {i} after A?", answer="A",
                             options=["x", "y"]) for i in range(ROWS)]

    def build_prompt(self, row, *, family, thinking):
        time.sleep(float(os.environ.get("SLOW_S", "0")))
        if os.environ.get("SLOW_LOG"):
            with open(os.environ["SLOW_LOG"], "a") as f:
                f.write(json.dumps([row.id, os.getpid()]) + "\\n")
        return row.problem

    def extract(self, row, response):
        return response.strip()[:1] or None

    def score(self, row, prediction):
        return float(prediction == row.answer)

    def aggregate(self, rows, scores):
        return {"overall": sum(scores) / len(scores), "categories": {}}


@hookimpl
def register_benchmarks(register):
    register("slow", Slow)
'''


@pytest.mark.slow
def test_on_ray_benchmark_workers_score_beside_training_and_a_pass_killed_midway_resumes(
    task: Any, tmp_path: Path
) -> None:
    """One actor worker trains while a benchmark worker of its own answers step 2's pass (20 rows, 0.5 s
    each to prompt): the loop does not wait for it. Killed (controller and Ray) with 16 rows answered,
    after step 2's checkpoint; resumed: the pass is finished with the kept weights, the 4 other rows
    asked once, each pass logged once, and every answer is what `videorl eval run` gives on the
    step-2 checkpoint."""
    import signal
    import time

    from videorl.runs.checkpoint import CheckpointManager

    (tmp_path / "slow_bench.py").write_text(SLOW_PLUGIN)
    asks, run = tmp_path / "asks.jsonl", tmp_path / "run"
    bench = f"trainer.benchmarks=[{{name: slow, data_root: {tmp_path}, every: 2, max_tokens: 4}}]"
    args = (
        bench,
        f"plugins=[{tmp_path / 'slow_bench.py'}]",
        "ray.benchmark_workers=1",
        "trainer.keep_last=0",
    )
    env = {"SLOW_S": "0.5", "SLOW_LOG": str(asks)}
    proc = _train(task, run, 4, *args, launcher="ray", ray_workers=1, env=env, wait=False)
    predictions = pass_dir(run, 2, "slow") / "slow" / "predictions.jsonl"
    try:
        deadline = time.monotonic() + 400
        while not (predictions.is_file() and len(predictions.read_text().splitlines()) >= 16):
            assert proc.poll() is None, proc.communicate()[1][-4000:]
            assert time.monotonic() < deadline, "step 2's pass never answered 16 rows"
            time.sleep(0.05)
        assert CheckpointManager(run / "checkpoints").latest() is not None  # step 2's, written meanwhile
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    answered = predictions.read_text().splitlines(keepends=True)
    assert len(answered) == 16 and (run / "benchmarks" / "step_000002" / "weights.safetensors").is_file()
    workers = {w["name"]: w["pid"] for w in json.loads((run / "ray-workers.json").read_text())}
    _wait_gone(workers["benchmark-0"])  # Ray ends its workers once the driver is gone
    first = [json.loads(line) for line in asks.read_text().splitlines()]
    assert {pid for _, pid in first} == {workers["benchmark-0"]}  # the group's own worker answers
    (row2,) = [r for r in read_metrics(run / "metrics.jsonl") if r["step"] == 2]
    assert "bench/slow/overall" not in row2 and row2["time/benchmarks"] < 4.0  # 16 rows took >= 8 s

    quick = {**env, "SLOW_S": "0"}  # the resumed run need not be slow
    done = _train(task, run, 4, *args, "--resume", "auto", launcher="ray", ray_workers=1, env=quick)
    assert done.returncode == 0, done.stderr[-4000:]
    after = predictions.read_text().splitlines(keepends=True)
    assert len(after) == 20 and after[:16] == answered
    asked = [row for row, _ in (json.loads(line) for line in asks.read_text().splitlines())][len(first) :]
    remaining = {f"q{i}" for i in range(20)} - {json.loads(line)["id"] for line in answered}
    assert len(asked) == 4 + 20 and set(asked[:4]) == remaining  # then step 4's pass: all 20 rows
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert [r.get("bench/slow/step") for r in rows] == [None, None, 2.0, 4.0]  # each pass once
    assert rows[2]["bench/slow/seconds"] > 0  # the part of the pass this run ran
    assert not (run / "benchmarks" / "step_000002" / "weights.safetensors").exists()

    evaluated = subprocess.run(
        [sys.executable, "-m", "videorl.cli", "--plugin", "slow_bench", "eval", "run", "--model",
         str(run / "checkpoints" / "step_000002"), "--benchmark", f"slow={tmp_path}",
         "--out", str(tmp_path / "eval"), "--max-tokens", "4", "--quiet"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert _records(tmp_path / "eval", "slow") == _records(pass_dir(run, 2, "slow"), "slow")
    assert (
        read_results(pass_dir(run, 2, "slow"))["benchmarks"]["slow"]["overall"]
        == rows[2]["bench/slow/overall"]
    )


def _wait_gone(pid: int) -> None:
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"process {pid} still runs 60 s after its Ray driver was killed")


def test_wandb_plots_a_benchmark_against_the_step_it_scored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """W&B takes steps in order only, so a pass logged in a later row is plotted against its own
    ``bench/NAME/step`` (one ``define_metric`` per benchmark, before its first row)."""
    from types import SimpleNamespace

    from videorl.runs.trackers import RunContext, WandbLogger

    calls: list[tuple[Any, ...]] = []
    run = SimpleNamespace(
        define_metric=lambda name, step_metric: calls.append(("define", name, step_metric)),
        log=lambda values, step: calls.append(("log", step, sorted(values))),
    )
    monkeypatch.setitem(sys.modules, "wandb", SimpleNamespace(init=lambda **kwargs: run))
    logger = WandbLogger(RunContext(tmp_path))
    logger.log(1, {"step": 1, "reward/overall": 0.5})
    logger.log(4, {"step": 4, "bench/mvbench/overall": 0.5, "bench/mvbench/step": 2.0})
    logger.log(6, {"step": 6, "bench/mvbench/overall": 0.7, "bench/mvbench/step": 6.0})
    assert calls == [
        ("log", 1, ["reward/overall"]),
        ("define", "bench/mvbench/*", "bench/mvbench/step"),
        ("log", 4, ["bench/mvbench/overall", "bench/mvbench/step"]),
        ("log", 6, ["bench/mvbench/overall", "bench/mvbench/step"]),
    ]


def test_benchmark_workers_are_a_group_of_their_own_and_need_benchmarks(tmp_path: Path, model: Path) -> None:
    from videorl.cluster.runtime import _groups, cpus_needed

    with pytest.raises(ConfigError, match=r"ray.benchmark_workers needs trainer.benchmarks"):
        load_config(None, ["ray.benchmark_workers=1"])
    ray = ["ray.benchmark_workers=2", "ray.placement=split", "ray.cpus_per_worker=0.5"]
    c = config(tmp_path, model, f"{{name: mvbench, data_root: {tmp_path}}}", extra=ray)
    assert ("benchmark", ["benchmark"], 2, "benchmark_gpus") in _groups(c)
    assert cpus_needed(c) == 0.5 * (1 + 1 + 2 + 1)  # actor, rollout, benchmark ×2, reward


def test_the_controller_hands_out_the_step_s_published_weights_once(tmp_path: Path, model: Path) -> None:
    """Split placement: the version the step's weight sync published (no second gather); colocated:
    gathered when first asked, then the same version for the rest of the step."""
    from types import SimpleNamespace

    from videorl.cluster.controller import Controller
    from videorl.cluster.weights import Published

    published: list[int] = []

    class Transport:
        def publish(self, version: int) -> Published:
            published.append(version)
            return Published(version, f"weights {version}", 1.0)

        def deliver(self, p: Published) -> float:
            return 0.0

    from videorl.cluster.async_driver import AsyncController

    stale = ["ray.placement=split", "trainer.max_staleness=1", "algorithm.rollout_correction=tis"]
    for driver, colocated, extra in ((Controller, False, []), (Controller, True, []),
                                     (AsyncController, False, stale)):  # fmt: skip
        published.clear()
        cluster = SimpleNamespace(colocated=colocated)
        cfg = config(tmp_path, model, extra=extra)
        controller = driver(cfg, cluster, None, [None], [], algorithm=built(cfg))  # type: ignore[arg-type, list-item]
        controller.transport = Transport()
        controller.step = 3
        if not colocated:
            controller._sync_weights()  # what step 3's weight sync does
        first, again = controller.current_weights(), controller.current_weights()
        assert first is again and first.version == 3 and published == [3], driver
        controller.close()


def test_benchmark_workers_without_ray_are_named_as_ignored(
    tmp_path: Path, model: Path, plugins: Any, backend: Any, mvbench: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from videorl.train.benchmarks import local_evaluations

    c = config(tmp_path, model, f"{{name: mvbench, data_root: {mvbench}}}", extra=["ray.benchmark_workers=1"])
    with caplog.at_level(logging.WARNING, logger="videorl.train.benchmarks"):
        evaluations = local_evaluations(BenchmarkPasses(c, plugins, backend), None, 0)
    assert len(evaluations) == 1  # the passes run, between steps
    assert "ray.benchmark_workers applies to runs on Ray (videorl train --ray) only" in caplog.text


def built(cfg: Any) -> Any:
    """The run's algorithm, as the composition root builds it once (installed plugins)."""
    from videorl import algorithms
    from videorl.plugins import load_plugins

    return algorithms.build(cfg.algorithm, load_plugins())
