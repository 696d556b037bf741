"""The benchmark: rows of ``annotations.jsonl`` (id, question, options, answer, category, video).

``video`` is a path relative to the data root (``videos/clip0.mp4``); ``answer`` is the letter of
the correct option.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from videorl.api import BenchmarkRow, DataError, answers, benchmark_summary, breakdown, mean


class JsonlBenchmark:
    name = "{{ cookiecutter.underscored }}"
    #: the figures that are the share of their rows scored 1 (their 95% interval is Wilson's; others,
    #: e.g. a macro average of the categories, are bootstrapped): here the overall accuracy and each
    #: category's
    proportions = ("overall", "category")

    def load(self, data_root: Path) -> list[BenchmarkRow]:
        root = Path(data_root).resolve()
        path = root / "annotations.jsonl"
        if not path.is_file():
            raise DataError(f"{path}: not found; put the benchmark's annotations.jsonl there")
        rows = []
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                video = item.get("video")
                rows.append(
                    BenchmarkRow(
                        id=str(item["id"]),
                        problem=item["question"],
                        options=item["options"],
                        answer=item["answer"],
                        problem_type="multiple_choice",  # the answer is an option letter
                        # the evaluator opens the path as given: make it absolute, under the data root
                        video=str(root / video) if video else None,
                        categories={"category": item.get("category", "all")},
                    )
                )
            except (KeyError, ValueError) as exc:
                raise DataError(f"{path}:{number}: malformed row ({exc})") from exc
        return rows

    def build_prompt(self, row: BenchmarkRow, *, family: str | None, thinking: bool) -> str:
        options = "\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(row.options or []))
        tail = "Think in <think></think>, then" if thinking else "Put"
        return f"{row.problem}\n{options}\n{tail} the letter in <answer></answer>."

    def extract(self, row: BenchmarkRow, response: str) -> Any:
        # the option letter of the last <answer> (else "the answer is (B)", \boxed{B}, an option's text)
        return answers.answer_choice(response, row.options)

    def score(self, row: BenchmarkRow, prediction: Any) -> float:
        return 1.0 if prediction is not None and prediction == row.answer else 0.0

    def aggregate(self, rows: list[BenchmarkRow], scores: list[float]) -> dict[str, Any]:
        return benchmark_summary(mean(scores), breakdown(rows, scores, ["category"]))
