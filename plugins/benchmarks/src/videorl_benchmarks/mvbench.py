"""MVBench (OpenGVLab/MVBench): 20 temporal tasks of 200 questions, clip bounds honoured.

Official files: ``json/<task>.json`` (one list per task: ``video``, ``question``, ``candidates`` (option
texts), ``answer`` (the option text), ``start``/``end`` for the bounded tasks) and ``video/`` with one
folder per source (task → folder as in VLMEvalKit). Rows of the bounded tasks (action_sequence,
action_prediction, object_interaction, action_localization, episodic_reasoning) carry ``clip``;
episodic_reasoning's "videos" are folders of frames (3 fps). fine_grained_pose needs NTU RGB+D, which
Hugging Face no longer ships. Metric: mean of the per-task accuracies (= accuracy on the full set).

EasyVideoR1's ``mvbench.json`` (18 tasks, no task field, whole videos) is read when ``json/`` is
absent; its ``start``/``end`` become clips here too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from videorl.api import BenchmarkRow, benchmark_summary, breakdown, group_means, macro_mean, mean
from videorl_benchmarks.base import BaseBenchmark, text_answer
from videorl_benchmarks.files import Record, read_records

#: task → (video folder under video/, bounded by start/end)
TASKS: dict[str, tuple[str, bool]] = {
    "action_sequence": ("star/Charades_v1_480", True),
    "action_prediction": ("star/Charades_v1_480", True),
    "action_antonym": ("ssv2_video", False),
    "fine_grained_action": ("Moments_in_Time_Raw/videos", False),
    "unexpected_action": ("FunQA_test/test", False),
    "object_existence": ("clevrer/video_validation", False),
    "object_interaction": ("star/Charades_v1_480", True),
    "object_shuffle": ("perception/videos", False),
    "moving_direction": ("clevrer/video_validation", False),
    "action_localization": ("sta/sta_video", True),
    "scene_transition": ("scene_qa/video", False),
    "action_count": ("perception/videos", False),
    "moving_count": ("clevrer/video_validation", False),
    "moving_attribute": ("clevrer/video_validation", False),
    "state_change": ("perception/videos", False),
    "fine_grained_pose": ("nturgbd", False),
    "character_order": ("perception/videos", False),
    "egocentric_navigation": ("vlnqa", False),
    "episodic_reasoning": ("tvqa/frames_fps3_hq", True),
    "counterfactual_inference": ("clevrer/video_validation", False),
}


def _clip(rec: Record) -> tuple[float, float] | None:
    if not (rec.has("start") and rec.has("end")):
        return None
    start, end = rec.number("start"), rec.number("end")
    if not 0 <= start < end:
        raise rec.error(f"clip bounds start={start}, end={end} are not an interval")
    return (start, end)


class MVBench(BaseBenchmark):
    name = "mvbench"
    proportions = ("accuracy (pooled)", "categories")  # the overall, a mean of task accuracies, is not one
    official_files = ("json",)
    unified_file = "mvbench.json"
    preamble = (
        "Carefully watch the video and pay attention to the cause and sequence of events, the detail and "
        "movement of objects, and the action and pose of persons. Based on your observations, select the "
        "best option that accurately addresses the question."
    )
    question_label = "Question: "
    options_header = "Options:"
    option_format = "({letter}) {text}"
    instructions: ClassVar[dict[str, str]] = {"multiple_choice": "Only give the best option."}

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        rows = []
        for task, (folder, bounded) in TASKS.items():
            task_file = path / f"{task}.json"
            if not task_file.is_file():
                continue
            for index, rec in enumerate(read_records(task_file)):
                options = [str(c) for c in rec.items("candidates")]
                rows.append(
                    BenchmarkRow(
                        id=f"{task}/{index}",
                        problem=rec.text("question"),
                        answer=text_answer(rec, rec.text("answer"), options),
                        video=str(root / "video" / folder / rec.text("video")),
                        options=options,
                        categories={"task": task},
                        clip=_clip(rec) if bounded else None,
                    )
                )
        return rows

    def adapt_unified(self, rec: Record, row: BenchmarkRow) -> BenchmarkRow:
        row.clip = _clip(rec)
        return row

    def summarize(self, rows: list[BenchmarkRow], scores: list[float]) -> dict[str, Any]:
        """Mean of the per-task accuracies when every row has a task, else the plain accuracy."""
        if rows and all("task" in r.categories for r in rows):
            overall = macro_mean(group_means(rows, scores, "task"))
        else:
            overall = mean(scores)
        return benchmark_summary(
            overall, breakdown(rows, scores), metrics={"accuracy (pooled)": mean(scores)}
        )
