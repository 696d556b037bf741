"""``videorl filter``: k rollouts of a tiny model per sample, keep 0 < pass rate < 1, resume after a crash.

A test reward makes the pass rates hand-computable whatever the random model writes: its accuracy
follows the ground truth alone — ``pass``: 1, ``fail``: 0, ``first:N``: 1 for the first N responses
of a sample scored, 0 for the others (so with k = 4 the pass rate is N/4).
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from videorl import hookimpl
from videorl.rewards.types import RewardInput, RewardOutput

K = 4
TRUTHS = {
    "s0": "pass",
    "s1": "fail",
    "s2": "first:1",
    "s3": "first:3",
    "s4": "pass",
    "s5": "first:2",
    "v0": "first:2",
}
KEPT = {"s2": 0.25, "s3": 0.75, "s5": 0.5, "v0": 0.5}


class Killed(Exception):
    """Stands for a kill in the middle of a run."""


class ByTruth:
    """The accuracy the ground truth dictates (see the module docstring)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, inp: RewardInput) -> RewardOutput:
        truth = str(inp.ground_truth)
        if truth in ("pass", "fail"):
            accuracy = float(truth == "pass")
        else:
            with self.lock:
                self.calls[inp.sample_id] += 1
                accuracy = float(self.calls[inp.sample_id] <= int(truth.split(":")[1]))
        return RewardOutput(accuracy, {"accuracy": accuracy})


@hookimpl
def register_rewards(register: Any) -> None:
    """This module is also the plugin that registers the test reward (``--plugin test_filter``)."""
    register("by_truth", ByTruth, description="accuracy from the ground truth (tests)")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Text rows and one video row (with a relative path), in the EasyVideoR1 schema."""
    from videorl.demo import clip_frames
    from videorl.media.synthetic import write_video

    root = tmp_path_factory.mktemp("filter-data")
    (root / "clips").mkdir()
    import random

    write_video(root / "clips" / "v0.mp4", clip_frames("red", random.Random(0)), fps=2.0)
    rows = []
    for sample_id, truth in TRUTHS.items():
        row: dict[str, Any] = {
            "id": sample_id,
            "problem_type": "by_truth",
            "problem": f"Question {sample_id}?",
            "answer": truth,
            "source": "unit-test",
        }
        if sample_id.startswith("v"):
            row |= {"data_type": "video", "videos": ["clips/v0.mp4"]}
        rows.append(row)
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "prompt.jinja").write_text("{{ problem }}\n")
    return root


def _invoke(tiny_model_dir: Callable[[str], Path], dataset: Path, out: Path, *extra: str) -> Any:
    from click.testing import CliRunner

    from videorl.cli import make_cli
    from videorl.plugins import load_plugins

    args = [
        "filter",
        str(dataset / "data.jsonl"),
        "--k",
        str(K),
        "--model",
        str(tiny_model_dir("qwen2_5_vl")),
        "--out",
        str(out),
        "--engine",
        "hf",
        "--batch-size",
        "2",
        "rollout.max_response_length=4",
        "model.dtype=float32",
        f"data.prompt_template={dataset / 'prompt.jinja'}",
        "data.video_max_pixels=3136",
        *extra,
    ]
    return CliRunner().invoke(
        make_cli(load_plugins(extra=[sys.modules[__name__]])), args, catch_exceptions=False
    )


def test_keeps_rows_with_a_pass_rate_strictly_between_zero_and_one(
    tiny_model_dir: Callable[[str], Path], dataset: Path, tmp_path: Path
) -> None:
    from videorl.data import load_samples

    out = tmp_path / "elsewhere" / "filtered.jsonl"
    result = _invoke(tiny_model_dir, dataset, out)
    assert result.exit_code == 0, result.output
    assert "4 of 7 samples kept" in result.output and "2 always solved, 1 never solved" in result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["pass_rate"]) for r in rows] == list(KEPT.items())  # input order
    assert rows[0] == {
        "id": "s2",
        "problem_type": "by_truth",
        "problem": "Question s2?",
        "answer": "first:1",
        "source": "unit-test",
        "pass_rate": 0.25,
    }  # the input's row, plus pass_rate
    assert rows[-1]["videos"] == ["../../" + dataset.name + "/clips/v0.mp4"]
    (video,) = [s for s in load_samples(out) if s.id == "v0"]
    assert video.videos == [str(dataset / "clips" / "v0.mp4")]  # still the same file from the new place
    progress = [
        json.loads(line) for line in (out.parent / "filtered.jsonl.progress.jsonl").read_text().splitlines()
    ]
    assert {p["id"]: p["pass_rate"] for p in progress} == {
        "s0": 1.0,
        "s1": 0.0,
        "s2": 0.25,
        "s3": 0.75,
        "s4": 1.0,
        "s5": 0.5,
        "v0": 0.5,
    }
    assert all(len(p["accuracies"]) == K and p["k"] == K for p in progress)


def test_a_crashed_run_continues_with_the_samples_not_yet_scored(
    tiny_model_dir: Callable[[str], Path], dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from videorl.rollout.hf import HFEngine

    out = tmp_path / "filtered.jsonl"
    generate = HFEngine.generate
    calls: list[int] = []

    def crash_on_the_third_batch(self: HFEngine, prompts: Any, params: Any) -> Any:
        calls.append(len(prompts))
        if len(calls) == 3:
            raise Killed  # as if the run were killed between two batches
        return generate(self, prompts, params)

    monkeypatch.setattr(HFEngine, "generate", crash_on_the_third_batch)
    with pytest.raises(Killed):
        _invoke(tiny_model_dir, dataset, out)
    progress = out.parent / "filtered.jsonl.progress.jsonl"
    first = progress.read_text()
    assert [json.loads(line)["id"] for line in first.splitlines()] == ["s0", "s1", "s2", "s3"]
    assert not out.exists()  # the output appears only once every sample is scored
    with progress.open("a") as f:
        f.write('{"id": "s4", "response": nu')  # a line torn by a kill: s4 is not done

    calls.clear()
    result = _invoke(tiny_model_dir, dataset, out)
    assert result.exit_code == 0, result.output
    assert "continuing: 4 of 7 samples already scored" in result.output
    assert calls == [2, 1]  # s4 s5, then v0: nothing scored twice
    assert progress.read_text().startswith(first)
    assert [json.loads(line)["id"] for line in progress.read_text().splitlines()] == list(TRUTHS)
    assert [(r["id"], r["pass_rate"]) for r in map(json.loads, out.read_text().splitlines())] == list(
        KEPT.items()
    )

    result = _invoke(tiny_model_dir, dataset, tmp_path / "filtered.jsonl", "--k", "3")
    assert result.exit_code != 0 and "k=4, this run asks k=3" in result.output


@pytest.mark.slow
def test_the_vllm_engine_gives_the_same_pass_rates(
    tiny_model_dir: Callable[[str], Path], dataset: Path, tmp_path: Path
) -> None:
    """``--engine vllm`` in a subprocess (vLLM changes process-wide settings); this file is the plugin."""
    import os
    import subprocess

    pytest.importorskip("vllm")
    out = tmp_path / "filtered.jsonl"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "videorl.cli",
            "--plugin",
            Path(__file__).stem,
            "filter",
            str(dataset / "data.jsonl"),
            "--k",
            str(K),
            "--model",
            str(tiny_model_dir("qwen2_5_vl")),
            "--out",
            str(out),
            "--engine",
            "vllm",
            "rollout.max_response_length=4",
            "model.dtype=float32",
            f"data.prompt_template={dataset / 'prompt.jinja'}",
            "data.video_max_pixels=3136",
            "rollout.engine_options={max_model_len: 1024}",
        ],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "4 of 7 samples kept" in done.stdout
    assert [(r["id"], r["pass_rate"]) for r in map(json.loads, out.read_text().splitlines())] == list(
        KEPT.items()
    )
