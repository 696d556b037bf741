"""``videorl eval score`` and ``videorl eval compare`` end to end, with a benchmark plugin written here."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from videorl.errors import ConfigError
from videorl.eval import read_results
from videorl.testing import CliResult

PLUGIN = textwrap.dedent(
    '''
    import json
    from pathlib import Path

    from videorl.api import BenchmarkRow, DataError, benchmark_summary, breakdown, hookimpl, mean


    class Colours:
        """Rows from questions.json: {"id", "answer", "shade"}; the answer is the response's first word."""

        name = "colours"

        def load(self, data_root):
            path = Path(data_root) / "questions.json"
            if not path.is_file():
                raise DataError(f"colours: {path} does not exist")
            return [BenchmarkRow(q["id"], "Colour?", q["answer"], categories={"shade": q["shade"]})
                    for q in json.loads(path.read_text())]

        def build_prompt(self, row, *, family, thinking):
            return row.problem

        def extract(self, row, response):
            words = response.split()
            return words[0].lower() if words else None

        def score(self, row, prediction):
            return float(prediction == row.answer)

        def aggregate(self, rows, scores):
            return benchmark_summary(mean(scores), breakdown(rows, scores))


    @hookimpl
    def register_benchmarks(register):
        register("colours", Colours)
    '''
)


@pytest.fixture
def colours(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data root with four questions, and the plugin module importable as ``colours_plugin``."""
    (tmp_path / "colours_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    data = tmp_path / "data"
    data.mkdir()
    questions = [
        {"id": "q1", "answer": "red", "shade": "warm"},
        {"id": "q2", "answer": "blue", "shade": "cold"},
        {"id": "q3", "answer": "orange", "shade": "warm"},
        {"id": "q4", "answer": "teal", "shade": "cold"},
    ]
    (data / "questions.json").write_text(json.dumps(questions))
    return data


def _predictions(path: Path, records: list[dict[str, object]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


RECORDS: list[dict[str, object]] = [
    {"id": "q1", "response": "Red, clearly."},
    {"id": "q2", "response": "green"},
    {"id": "q3", "error": "missing video /videos/q3.mp4"},
    # q4: no prediction at all
    {"id": "q9", "response": "red"},
]


def test_score_counts_failures_and_lists_them(
    colours: Path, tmp_path: Path, run_cli: Callable[..., CliResult]
) -> None:
    preds = _predictions(tmp_path / "p.jsonl", RECORDS)
    out = tmp_path / "summary.json"
    args = ["--plugin", "colours_plugin", "eval", "score", "--benchmark", "colours"]
    result = run_cli(*args, "--predictions", str(preds), "--data-root", str(colours), "--output", str(out))
    result.assert_success()
    summary = json.loads(out.read_text())
    assert summary["n"] == 4 and summary["n_failed"] == 2
    assert summary["failed"] == [
        {"id": "q3", "reason": "missing video /videos/q3.mp4"},
        {"id": "q4", "reason": "missing prediction"},
    ]
    assert (
        summary["overall"] == 0.0
    )  # q1's first word is "red," (the plugin's extraction is literal), q2 wrong
    assert "colours: accuracy 0.00% (n=4, failed=2)" in result.output
    assert "q4: missing prediction" in result.output
    assert "1 predictions have ids that are not in colours" in result.stderr

    preds = _predictions(tmp_path / "p.jsonl", [{"id": "q1", "response": "red"}, *RECORDS[1:]])
    result = run_cli(*args, "--predictions", str(preds), "--data-root", str(colours), "--json")
    result.assert_success()
    summary = result.json()
    assert summary["overall"] == 0.25
    assert summary["categories"] == {"shade": {"cold": 0.0, "warm": 0.5}}


def test_score_into_a_run_directory(colours: Path, tmp_path: Path, run_cli: Callable[..., CliResult]) -> None:
    run = tmp_path / "run"
    _predictions(
        run / "colours" / "predictions.jsonl",
        [{"id": "q1", "response": "red"}, {"id": "q2", "response": "blue"}],
    )
    args = [
        "--plugin",
        "colours_plugin",
        "eval",
        "score",
        "--benchmark",
        "colours",
        "--data-root",
        str(colours),
    ]
    run_cli(*args, "--run", str(run)).assert_success()
    assert read_results(run)["benchmarks"]["colours"]["overall"] == 0.5
    assert (run / "colours" / "scores.jsonl").is_file()


def test_score_bad_inputs(colours: Path, tmp_path: Path, run_cli: Callable[..., CliResult]) -> None:
    preds = _predictions(tmp_path / "p.jsonl", RECORDS)
    base = ["--plugin", "colours_plugin", "eval", "score"]
    result = run_cli(*base, "--benchmark", "colors", "--predictions", str(preds), "--data-root", str(colours))
    assert result.exit_code == 1 and "unknown benchmark 'colors'. Did you mean 'colours'?" in result.stderr
    result = run_cli(
        *base, "--benchmark", "colours", "--predictions", str(preds), "--data-root", str(tmp_path / "x")
    )
    assert result.exit_code == 1 and "questions.json does not exist" in result.stderr
    (tmp_path / "bad.jsonl").write_text(
        '{"id": "q1", "response": "red"}\n{"id": \n{"id": "q2", "response": "x"}\n'
    )
    result = run_cli(
        *base,
        "--benchmark",
        "colours",
        "--predictions",
        str(tmp_path / "bad.jsonl"),
        "--data-root",
        str(colours),
    )
    assert result.exit_code == 1 and "bad.jsonl:2: not valid JSON" in result.stderr
    result = run_cli(*base, "--benchmark", "colours", "--data-root", str(colours))
    assert result.exit_code == 2 and "give --predictions P.jsonl or --run RUN" in result.stderr


@pytest.mark.slow
def test_compare_runs(tmp_path: Path, run_cli: Callable[..., CliResult]) -> None:
    for name, overall, warm in (("base", 0.5, 0.4), ("rl", 0.75, 0.6)):
        (tmp_path / name).mkdir()
        results = {
            "format": "videorl-eval/1",
            "settings": {},
            "benchmarks": {
                "colours": {"overall": overall, "metric": "accuracy", "categories": {"shade": {"warm": warm}}}
            },
        }
        (tmp_path / name / "results.json").write_text(json.dumps(results))  # fmt: skip
    md, png = tmp_path / "cmp.md", tmp_path / "cmp.png"
    result = run_cli(
        "eval",
        "compare",
        str(tmp_path / "base"),
        str(tmp_path / "rl"),
        "--markdown",
        str(md),
        "--png",
        str(png),
    )
    result.assert_success()
    lines = result.output.splitlines()
    assert lines[0].split() == ["benchmark", "line", "base", "rl", "delta"]
    assert lines[2].split() == ["colours", "overall", "(accuracy)", "50.00%", "75.00%", "+25.00"]
    assert lines[3].split() == ["colours", "shade:", "warm", "40.00%", "60.00%", "+20.00"]
    assert "| **colours** | **overall (accuracy)** | **50.00%** | **75.00%** | **+25.00** |" in md.read_text()
    assert png.read_bytes()[:4] == b"\x89PNG"
    result = run_cli("eval", "compare", str(tmp_path / "base"), str(tmp_path / "nowhere"))
    assert result.exit_code == 1 and "an evaluation run directory" in result.stderr


def test_training_and_evaluation_share_each_familys_default_budget(tmp_path: Path) -> None:
    """One frame cache serves a family's training run and its evaluation: with no budget key set,
    both decode with the same parameters (Qwen3-VL: 4 × 32² = 4096 least pixels, not 3136)."""
    from videorl.config import load_config
    from videorl.eval.inputs import visual_params
    from videorl.plugins import load_plugins
    from videorl.train.compose import make_encoder

    plugins = load_plugins()
    config = load_config(None, [f"model.path={tmp_path}", f"data.train_files=[{tmp_path / 'train.jsonl'}]"])
    families = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"]
    for family in families:
        backend = plugins.model_backends.create(family)
        encoder = make_encoder(config, backend, plugins)
        assert (encoder.media.video_params, encoder.media.image_params) == visual_params(backend), family
    qwen3 = make_encoder(config, plugins.model_backends.create("qwen3_vl"), plugins)
    assert (qwen3.media.video_params.min_pixels, qwen3.media.image_params.min_pixels) == (4096, 4096)
    # a key that is set overrides the family's value; a combination that cannot fit names the keys
    small = load_config(
        None,
        [
            f"model.path={tmp_path}",
            f"data.train_files=[{tmp_path / 't.jsonl'}]",
            "data.video_max_pixels=3136",
        ],
    )
    with pytest.raises(
        ConfigError,
        match=r"data: video_min_pixels \(4096\) must be positive and at most "
        r"video_max_pixels \(3136\) \(with data.video_max_pixels=3136;",
    ):
        make_encoder(small, plugins.model_backends.create("qwen3_vl"), plugins)


@pytest.mark.slow
def test_run_takes_a_training_run_or_one_of_its_checkpoints(
    colours: Path, tmp_path: Path, run_cli: Callable[..., CliResult]
) -> None:
    """``--model RUN`` evaluates the run's latest checkpoint (exported to OUT/model, as ``videorl
    export`` would), not its base model; the same checkpoint again reuses the export."""
    import torch
    from safetensors.torch import load_file

    from videorl.config import dump_config, load_config
    from videorl.runs.checkpoint import CheckpointManager
    from videorl_models.tiny import build_tiny

    base = build_tiny("qwen2_5_vl", tmp_path / "base", seed=0)
    trained = {k: v + 0.5 for k, v in load_file(str(base / "model.safetensors")).items()}
    run = tmp_path / "train-run"
    step = CheckpointManager(run / "checkpoints").save(3, model_state=trained)
    config = load_config(
        None, [f"model.path={base}", f"data.train_files=[{tmp_path / 't.jsonl'}]", f"output_dir={run}"]
    )
    (run / "config.yaml").write_text(dump_config(config, run))

    out = tmp_path / "eval"
    args = [
        "--plugin",
        "colours_plugin",
        "eval",
        "run",
        "--benchmark",
        "colours",
        "--data-root",
        str(colours),
        "--out",
        str(out),
        "--max-tokens",
        "2",
        "--quiet",
    ]
    result = run_cli(*args, "--model", str(run))
    result.assert_success()
    assert f"exported {step.resolve()} to {out / 'model'}" in result.output
    exported = load_file(str(out / "model" / "model.safetensors"))
    assert exported.keys() <= trained.keys()
    for name, tensor in exported.items():  # in the run's model.dtype (bfloat16 by default)
        assert tensor.dtype == torch.bfloat16, name
        torch.testing.assert_close(tensor, trained[name].to(torch.bfloat16), rtol=0, atol=0, msg=name)
    assert read_results(out)["settings"]["model"]["path"] == str((out / "model").resolve())
    again = run_cli(*args, "--model", str(step))  # the checkpoint itself: the same export, reused
    again.assert_success()
    assert "exported" not in again.output


def test_score_and_compare_never_write_over_what_they_read(
    colours: Path, tmp_path: Path, run_cli: Callable[..., CliResult]
) -> None:
    preds = _predictions(tmp_path / "p.jsonl", RECORDS)
    before = preds.read_bytes()
    args = [
        "--plugin",
        "colours_plugin",
        "eval",
        "score",
        "--benchmark",
        "colours",
        "--data-root",
        str(colours),
    ]
    result = run_cli(*args, "--predictions", str(preds), "--output", str(preds))
    assert result.exit_code != 0 and f"--output {preds} is the input file" in result.stderr
    assert preds.read_bytes() == before
    results = {"format": "videorl-eval/1", "settings": {}, "benchmarks": {"colours": {"overall": 0.5}}}
    for name in ("base", "rl"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(results))
    kept = (tmp_path / "rl" / "results.json").read_bytes()
    target = tmp_path / "rl" / "results.json"
    result = run_cli("eval", "compare", str(tmp_path / "base"), str(tmp_path / "rl"), "--json", str(target))
    assert result.exit_code != 0 and f"--json {target} lies inside {tmp_path / 'rl'}" in result.stderr
    assert target.read_bytes() == kept
