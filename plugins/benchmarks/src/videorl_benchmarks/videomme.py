"""Video-MME (lmms-lab/Video-MME), without and with subtitles.

Official files: ``videomme/test-00000-of-00001.parquet`` (or the same rows as ``videomme/*.jsonl`` /
``*.json``): ``question_id``, ``videoID``, ``duration`` (short/medium/long), ``domain``,
``sub_category``, ``task_type``, ``question``, ``options`` (["A. ..."]), ``answer`` (letter). Videos
``data/<videoID>.mp4`` (lmms-eval), ``videos/`` (EasyVideoR1) or ``video/`` (VLMEvalKit); subtitles
``subtitle/<videoID>.srt``. EasyVideoR1's ``videomme.json`` is read when the parquet is absent.
Metric: accuracy, by duration, domain, sub-category and task type.

Official figure: the rule of Video-MME's ``eval_your_results.py`` (``extract_characters_regex``) on the
answer part of the response (:func:`~videorl_benchmarks.base.official_text`): the answer prefixes are
removed, then the **first** capital A–D anywhere is the answer; a response with none is left out of the
denominator (not counted wrong). videorl's reading (the option letter by the shared rules, every row
counted) is reported beside it in ``metrics``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar

from videorl.api import BenchmarkRow, answers
from videorl_benchmarks.base import BaseBenchmark, letter_answer, official_text
from videorl_benchmarks.files import Record, read_records, resolve_media

_CATEGORIES = ("duration", "domain", "sub_category", "task_type")
_VIDEO_DIRS = ("data", "videos", "video")
_SUBTITLE_HEADER = "This video's subtitles are listed below:"


def video_candidates(video_id: str) -> list[str]:
    return [f"{d}/{video_id}{ext}" for ext in (".mp4", ".MP4", ".mkv") for d in _VIDEO_DIRS]


_SRT_TIME = re.compile(r"(\d+):(\d+):(\d+)[,.](\d+)\s*-->\s*(\d+):(\d+):(\d+)[,.](\d+)")
_TAGS = re.compile(r"<[^>]+>")


def parse_srt(text: str) -> list[tuple[float, float, str]]:
    """``(start, end, text)`` of each cue of an SRT file (markup removed)."""
    cues: list[tuple[float, float, str]] = []
    lines = text.replace("\r\n", "\n").split("\n")
    i = 0
    while i < len(lines):
        match = _SRT_TIME.search(lines[i])
        i += 1
        if not match:
            continue
        g = [int(x) for x in match.groups()]
        start = g[0] * 3600 + g[1] * 60 + g[2] + g[3] / 1000
        end = g[4] * 3600 + g[5] * 60 + g[6] + g[7] / 1000
        body = []
        while i < len(lines) and lines[i].strip():
            body.append(_TAGS.sub("", lines[i]).strip())
            i += 1
        if any(body):
            cues.append((start, end, " ".join(b for b in body if b)))
    return cues


# eval_your_results.py's answer_prefixes as written there: two commas are missing, so "The best option is"
# "The correct option is" and "Best answer:" "Best option:" are each one fused string (rarely present)
_OFFICIAL_PREFIXES = (
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "The answer",
    "The best option isThe correct option is",
    "Best answer:Best option:",
)
_OFFICIAL_LETTER = re.compile(r"[ABCD]")


def official_letter(text: str) -> str | None:
    """Video-MME's official ``extract_characters_regex``: strip, remove each answer prefix, then the first
    ``[ABCD]`` match (the script's "more than 10 words and no letter" case gives none as well)."""
    text = text.strip()
    for prefix in _OFFICIAL_PREFIXES:
        text = text.replace(prefix, "")
    found = _OFFICIAL_LETTER.search(text)
    return found.group(0) if found else None


class VideoMME(BaseBenchmark):
    """Video-MME without subtitles (the setting EasyVideoR1 reports)."""

    name = "video-mme"
    official_files = ("videomme/*.parquet", "videomme/*.jsonl", "videomme/*.json")
    unified_file = "videomme.json"
    unified_categories: ClassVar[dict[str, str]] = {c: c for c in _CATEGORIES[:3]} | {
        "original_question_type": "task_type"
    }
    # Qwen3-VL's Video-MME script
    preamble = (
        "Select the best answer to the following multiple-choice question based on the video. "
        "Respond with only the letter (A, B, C, or D) of the correct option."
    )
    question_label = "Question: "
    instructions: ClassVar[dict[str, str]] = {"multiple_choice": "The best answer is:"}
    aggregates_predictions = True
    official_leaves_out_unread = True

    def official_read(self, row: BenchmarkRow, response: str) -> Any:
        return official_letter(official_text(response))

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        return [self._row(root, rec) for rec in read_records(path)]

    def _row(self, root: Path, rec: Record) -> BenchmarkRow:
        options = [answers.strip_option_letter(o) for o in rec.items("options")]
        video_id = rec.text("videoID")
        return BenchmarkRow(
            id=rec.text("question_id"),
            problem=rec.text("question"),
            answer=letter_answer(rec, rec.text("answer"), len(options)),
            video=resolve_media(root, video_candidates(video_id)),
            options=options,
            categories={c: rec.text(c) for c in _CATEGORIES},
            extra={"video_id": video_id},
        )

    def adapt_unified(self, rec: Record, row: BenchmarkRow) -> BenchmarkRow:
        row = super().adapt_unified(rec, row)
        if rec.has("videoID"):
            row.extra["video_id"] = str(rec.get("videoID"))
        return row


class VideoMMESubtitles(VideoMME):
    """Video-MME with subtitles: every cue of ``subtitle/<videoID>.srt`` before the question.

    Qwen3-VL's script keeps only the cues that cover a sampled frame; this adapter gives them all
    (lmms-eval's ``frame_num = -1`` setting). A video without a subtitle file gets no subtitle block.
    """

    name = "video-mme-sub"

    def read(self, root: Path) -> list[BenchmarkRow]:
        rows = super().read(root)
        cache: dict[str, list[str]] = {}
        for row in rows:
            video_id = row.extra.get("video_id")
            if video_id is None:
                continue
            if video_id not in cache:
                srt = root / "subtitle" / f"{video_id}.srt"
                cues = parse_srt(srt.read_text(encoding="utf-8", errors="replace")) if srt.is_file() else []
                cache[video_id] = [text for _, _, text in cues]
            row.extra["subtitles"] = cache[video_id]
        return rows

    def build_prompt(self, row: BenchmarkRow, *, family: str | None, thinking: bool) -> str:
        prompt = super().build_prompt(row, family=family, thinking=thinking)
        subtitles: Any = row.extra.get("subtitles")
        if not subtitles:
            return prompt
        return f"{_SUBTITLE_HEADER}\n" + "\n".join(subtitles) + "\n" + prompt
