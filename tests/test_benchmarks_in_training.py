"""Benchmarks during training (``trainer.benchmarks``): passes, their files and metrics, resume, failures.

The benchmark is MVBench in its official layout (``json/object_existence.json``, ``video/...``) with a
few real H.264 clips; the model's answers come from a scripted engine (answers by sample id) where the
test needs to count them, and from the tiny policy itself in the training runs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from videorl.backend import backend_for_model
from videorl.config import load_config
from videorl.errors import ConfigError, VideorlError
from videorl.eval import read_predictions, read_results
from videorl.media.synthetic import textured_frames, write_video
from videorl.plugins import load_plugins
from videorl.rollout import Completion, SamplingParams
from videorl.train.benchmarks import (
    BenchmarkPasses,
    RowOutcome,
    WorkerBenchmarks,
    evaluator_runner,
    pass_dir,
    rows_request,
    rows_runner,
)

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


def config(run: Path, model: Path, *benchmarks: str, steps: int = 5, strict: bool = False) -> Any:
    return load_config(
        None,
        [
            f"output_dir={run}", f"model.path={model}", "data.train_files=[unused.jsonl]",
            "data.video_fps=2", "data.video_max_frames=2", "data.video_max_pixels=3136",
            f"trainer.max_steps={steps}", f"trainer.benchmarks=[{', '.join(benchmarks)}]",
            f"trainer.benchmarks_strict={str(strict).lower()}",
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
    assert results["settings"]["model"]["path"].endswith("checkpoints/step_000002")
    assert results["settings"]["video"]["fps"] == 2.0  # the run's budget (data.video_fps)
    predictions = read_predictions(directory / "mvbench" / "predictions.jsonl")
    assert {i: p.record["prediction"] for i, p in predictions.items()} == {
        "object_existence/0": "A", "object_existence/1": "B", "object_existence/2": "A", "object_existence/3": "A"
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
