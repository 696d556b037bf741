"""Registration: every adapter is registered lazily and satisfies the interface."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from videorl.api import Benchmark, BenchmarkRow, answers, benchmark_summary, mean
from videorl.plugins import load_plugins
from videorl.testing import assert_benchmark_contract, write_test_video
from videorl_benchmarks.plugin import BENCHMARKS


def test_all_benchmarks_registered_with_their_own_names() -> None:
    plugins = load_plugins()
    registered = set(plugins.benchmarks.by_origin("videorl-benchmarks"))
    assert registered == set(BENCHMARKS)
    assert len(registered) == 24  # the 22 of the paper + Video-MME with subtitles + MMVU with open-ended
    for name in BENCHMARKS:
        bench = plugins.benchmarks.create(name)
        assert isinstance(bench, Benchmark)
        assert bench.name == name
    assert plugins.benchmarks.canonical("videomme") == "video-mme"
    assert plugins.benchmarks.canonical("VSIBench") == "vsi-bench"


def test_registration_imports_no_adapter() -> None:
    code = (
        "import sys; from videorl.plugins import load_plugins; load_plugins(); "
        "print(sorted(m for m in sys.modules if m.startswith('videorl_benchmarks.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['videorl_benchmarks.plugin']"


class _RelativeMedia:
    """The cookiecutter benchmark's old bug: the video path left relative to the data root."""

    name = "relative"

    def __init__(self, **row: object) -> None:
        self.row = {
            "id": "1",
            "problem": "Colour?",
            "options": ["red", "blue"],
            "answer": "A",
            "video": "a.mp4",
            **row,
        }

    def load(self, data_root: Path) -> list[BenchmarkRow]:
        return [BenchmarkRow(**self.row)]  # type: ignore[arg-type]

    def build_prompt(self, row: BenchmarkRow, *, family: str | None, thinking: bool) -> str:
        return row.problem

    def extract(self, row: BenchmarkRow, response: str) -> Any:
        return answers.answer_choice(response, row.options)

    def score(self, row: BenchmarkRow, prediction: Any) -> float:
        return float(prediction == row.answer)

    def aggregate(self, rows: list[BenchmarkRow], scores: list[float]) -> dict[str, Any]:
        return benchmark_summary(mean(scores), {})


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ({}, r"row '1': video 'a.mp4' is relative; load\(\) must resolve it against the data root"),
        ({"video": "/elsewhere/a.mp4"}, "is not under the data root"),
        ({"video": "{root}/missing.mp4"}, "does not exist: put the file in the fixture"),
        ({"video": None, "answer": "C"}, r"answer 'C' is not one of the option letters \['A', 'B'\]"),
        ({"video": None, "options": ["red"]}, "needs at least two option texts"),
        ({"video": None, "problem_type": ""}, "problem_type ''"),
    ],
)
def test_the_contract_refuses_rows_the_evaluator_cannot_use(
    tmp_path: Path, row: dict[str, Any], match: str
) -> None:
    if isinstance(row.get("video"), str):
        row = {**row, "video": row["video"].format(root=tmp_path)}
    with pytest.raises(AssertionError, match=match):
        assert_benchmark_contract(_RelativeMedia(**row), tmp_path, require_media=True)


def test_the_contract_accepts_media_resolved_under_the_data_root(tmp_path: Path) -> None:
    write_test_video(tmp_path / "clips" / "a.mp4")
    rows = assert_benchmark_contract(
        _RelativeMedia(video=str(tmp_path / "clips" / "a.mp4")), tmp_path, require_media=True
    )
    assert rows[0].video == str(tmp_path / "clips" / "a.mp4")
