"""OVO-Bench (JoeLeelyf/OVO-Bench): online video understanding, scored with the official rules.

Official file: ``ovo_bench_new.json`` (a list). Backward-tracing (EPM, ASI, HLD) and real-time (OCR,
ACR, ATR, STU, FPD, OJR) items: ``id``, ``task``, ``question``, ``options`` (texts), ``gt`` (index);
forward items (REC, SSR, CRR) have ``test_info``, one test point each, which becomes one row
``<id>_<i>``: REC (``activity``; ``count``), SSR (``step`` and ``type`` 1 = Yes, 0 = No; the row's
answer is "Yes"/"No"), CRR (``question``; ``type``). Videos are the pre-cut chunks ``chunked_videos/<id>.mp4``
and ``chunked_videos/<id>_<i>.mp4`` (the video up to the query time). EasyVideoR1's ``ovobench.json``
(``ovo_task``, ``ovo_category``, ...) is read when the official file is absent.

Prompts: the official templates (backward/real-time with options "A. x; B. y;", and the REC/SSR/CRR
task descriptions); model families get EasyVideoR1's template for the multiple-choice tasks and the
official ones for the forward tasks. Scoring, official (``OVOBenchScore``) applied to the final answer
(the ``<answer>`` content or the text after the reasoning): backward/real-time correct when the truth
letter occurs in it; REC when its digits, concatenated, equal the count; SSR/CRR when it is exactly
"Y"/"N" for Yes/No, or contains the truth word ("Yes"/"No", case-sensitive). Overall = the mean of the
three category scores, each the mean of its tasks' accuracies.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from videorl.api import BenchmarkRow, answers, benchmark_summary, group_means, macro_mean, mean
from videorl_benchmarks.base import BaseBenchmark, index_answer
from videorl_benchmarks.files import Record, read_records
from videorl_benchmarks.prompts import thinking_ending

CATEGORIES = {
    "backward": ("EPM", "ASI", "HLD"),
    "realtime": ("OCR", "ACR", "ATR", "STU", "FPD", "OJR"),
    "forward": ("REC", "SSR", "CRR"),
}
TASK_CATEGORY = {task: cat for cat, tasks in CATEGORIES.items() for task in tasks}

# the official templates (OVO-Bench's constant.py), trailing spaces included
BR_TEMPLATE = (
    "\nQuestion: {}\nOptions:\n{}\n\n"
    "Respond only with the letter corresponding to your chosen option (e.g., A, B, C). \n"
    "Do not include any additional text or explanation in your response.\n"
)
REC_TEMPLATE = (
    "\nYou're watching a video in which people may perform a certain type of action repetively. \n"
    "The person performing this kind of action are referred to as 'they' in the following statement.\n"
    "You're task is to count how many times have different people in the video perform this kind of action "
    "in total.\n"
    "One complete motion counts as one. \n"
    "Now, answer the following question: {}\n"
    "Provide your answer as a single number (e.g., 0, 1, 2, 3…) indicating the total count.\n"
    "Do not include any additional text or explanation in your response.\n"
)
SSR_TEMPLATE = (
    "\nYou're watching a tutorial video which contain a sequential of steps. \n"
    "The following is one step from the whole procedures: \n{}\n"
    "Your task is to determine if the man or woman in the video is currently performing this step.\n"
    "Answer only with “Yes” or “No”.\n"
    "Do not include any additional text or explanation in your response.\n"
)
CRR_TEMPLATE = (
    "\nYou're responsible of answering questions based on the video content. \n"
    "The following question are relevant to the latest frames, i.e. the end of the video.\n{}\n"
    "Decide whether existing visual content, especially latest frames, i.e. frames that near the end of the "
    "video, provide enough information for answering the question.\n"
    "Answer only with “Yes” or “No”.\n"
    "Do not include any additional text or explanation in your response.\n"
)


class OVOBench(BaseBenchmark):
    name = "ovo-bench"
    metric = "mean of category means"
    proportions = ("accuracy (pooled)", "task")  # a category is a mean of its tasks' accuracies
    official_files = ("ovo_bench_new.json",)
    unified_file = "ovobench.json"

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        rows = []
        for rec in read_records(path):
            task = rec.text("task")
            if task not in TASK_CATEGORY:
                raise rec.error(f"unknown task {task!r} (known: {', '.join(TASK_CATEGORY)})")
            base_id = rec.text("id")
            cats: dict[str, str | list[str]] = {"task": task, "category": TASK_CATEGORY[task]}
            if TASK_CATEGORY[task] != "forward":
                options = [str(o) for o in rec.items("options")]
                rows.append(
                    BenchmarkRow(
                        id=base_id,
                        problem=rec.text("question"),
                        answer=index_answer(rec, rec.get("gt"), len(options)),
                        video=str(root / "chunked_videos" / f"{base_id}.mp4"),
                        options=options,
                        categories=cats,
                    )
                )
                continue
            for i, point in enumerate(rec.items("test_info")):
                test = Record(point if isinstance(point, dict) else {}, f"{rec.where} (test_info {i})")
                row = BenchmarkRow(
                    id=f"{base_id}_{i}",
                    problem="",
                    answer=None,
                    video=str(root / "chunked_videos" / f"{base_id}_{i}.mp4"),
                    categories=dict(cats),
                )
                if task == "REC":
                    row.problem, row.problem_type = rec.text("activity"), "counting"
                    row.answer = int(test.number("count"))
                else:
                    row.problem = test.text("step") if task == "SSR" else rec.text("question")
                    row.problem_type = "yes_no"
                    row.answer = "Yes" if int(test.number("type")) == 1 else "No"
                rows.append(row)
        return rows

    def adapt_unified(self, rec: Record, row: BenchmarkRow) -> BenchmarkRow:
        task = rec.text("ovo_task")
        if task not in TASK_CATEGORY:
            raise rec.error(f"unknown ovo_task {task!r}")
        row.categories.update(task=task, category=TASK_CATEGORY[task])
        if row.problem_type == "counting":
            row.answer = int(row.answer)
        elif row.problem_type == "yes_no":
            row.answer = str(row.answer).capitalize()
        return row

    # --- prompts ------------------------------------------------------------------------------------

    def official_prompt(self, row: BenchmarkRow, *, thinking: bool) -> str:
        task = str(row.categories.get("task"))
        if task == "REC":
            prompt = REC_TEMPLATE.format(f"How many times did they {row.problem}?")
        elif task == "SSR":
            prompt = SSR_TEMPLATE.format(row.problem)
        elif task == "CRR":
            prompt = CRR_TEMPLATE.format(row.problem)
        else:
            options = "; ".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(row.options or [])) + ";"
            prompt = BR_TEMPLATE.format(row.problem, options)
        return prompt + thinking_ending(row.problem_type) if thinking else prompt

    def build_prompt(self, row: BenchmarkRow, *, family: str | None, thinking: bool) -> str:
        if row.categories.get("category") == "forward":
            return self.official_prompt(row, thinking=thinking)
        return super().build_prompt(row, family=family, thinking=thinking)

    # --- scoring ------------------------------------------------------------------------------------

    def read_answer(self, row: BenchmarkRow, response: str) -> Any:
        return answers.answer_text(response).strip() or None

    def score_reading(self, row: BenchmarkRow, prediction: Any) -> float:
        if not prediction:
            return 0.0
        text = str(prediction)
        if row.problem_type == "counting":  # all digits of the answer, concatenated (the official REC rule)
            return float("".join(re.findall(r"\d", text)) == str(row.answer))
        if row.problem_type == "yes_no":  # the truth is "Yes" or "No"
            if text in ("Y", "N"):
                return float(text == str(row.answer)[0])
            return float(str(row.answer) in text)
        return float(str(row.answer) in text)

    def summarize(self, rows: list[BenchmarkRow], scores: list[float]) -> dict[str, Any]:
        tasks = group_means(rows, scores, "task")
        categories = {
            cat: macro_mean({t: tasks[t] for t in members if t in tasks})
            for cat, members in CATEGORIES.items()
            if any(t in tasks for t in members)
        }
        return benchmark_summary(
            macro_mean(categories),
            {"task": tasks, "category": categories},
            metric=self.metric,
            metrics={"accuracy (pooled)": mean(scores)},
        )
