"""Video-MMMU (lmms-lab/VideoMMMU): knowledge acquisition from lecture videos, three tracks.

Official files: ``Perception/``, ``Comprehension/``, ``Adaptation/``, each holding its Parquet file
(or the same rows as ``.jsonl``/``.json``): ``id`` ("<split>_<Subject>_<n>"), ``question``,
``options`` (list; empty for open questions), ``answer`` (letter, or the value of an open question),
``question_type``, and for Adaptation ``image`` (``{bytes, path}``, or a path). Videos
``<Track>/<id>.mp4``, ``videos/<id>.mp4`` or ``<id>.mp4``. Adaptation images are used from
``images/<id>.png``; image bytes in the Parquet file are written there on first load.

Prompts: the official track prompts (Perception/Comprehension ask to ignore the quiz in the last frame;
Adaptation shows the image after the video). Open questions with a numeric answer are ``numerical``:
correct when the answer's number equals the truth after rounding to 2 decimals (MMMU's open-answer
rule; EasyVideoR1 also requires the decimal point to be present in both). Reported by track, subject
and discipline. EasyVideoR1's ``videommmu_with_image.json`` is read when no track folder exists.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from videorl.api import BenchmarkRow, answers
from videorl_benchmarks.base import BaseBenchmark, letter_answer
from videorl_benchmarks.files import Record, data_files, read_records, resolve_media
from videorl_benchmarks.prompts import thinking_ending

TRACKS = ("Perception", "Comprehension", "Adaptation")

#: MMMU's subjects per discipline (Video-MMMU reports the same six disciplines)
DISCIPLINES = {
    **dict.fromkeys(["Art", "Art_Theory", "Design", "Music"], "Art"),
    **dict.fromkeys(["Accounting", "Economics", "Finance", "Manage", "Marketing"], "Business"),
    **dict.fromkeys(["Biology", "Chemistry", "Geography", "Math", "Physics"], "Science"),
    **dict.fromkeys(
        ["Basic_Medical_Science", "Clinical_Medicine", "Diagnostics_and_Laboratory_Medicine", "Pharmacy",
         "Public_Health"],
        "Medicine",
    ),
    **dict.fromkeys(["History", "Literature", "Sociology", "Psychology"], "Humanities"),
    **dict.fromkeys(
        ["Agriculture", "Architecture_and_Engineering", "Computer_Science", "Electronics", "Energy_and_Power",
         "Materials", "Mechanical_Engineering"],
        "Engineering",
    ),
}  # fmt: skip

_IGNORE_QUIZ = "Please ignore the Quiz question in last frame of the video."
_ADAPTATION = (
    "You should watch and learn the video content. Then apply what you learned to answer the following "
    "{kind} question. The image for this question is at the end of the video."
)


def subject_of(sample_id: str) -> str:
    match = re.match(r"^[A-Za-z]+_(.+?)_\d+$", sample_id)
    return match.group(1) if match else "unknown"


def _categories(sample_id: str) -> dict[str, str | list[str]]:
    subject = subject_of(sample_id)
    return {"subject": subject, "discipline": DISCIPLINES.get(subject, "other")}


class VideoMMMU(BaseBenchmark):
    name = "video-mmmu"
    official_files = TRACKS
    unified_file = "videommmu_with_image.json"

    def read_official(self, root: Path, path: Path) -> list[BenchmarkRow]:
        rows = []
        for track in TRACKS:
            folder = root / track
            for file in data_files(folder):
                rows += [self._row(root, track, rec) for rec in read_records(file)]
        return rows

    def _row(self, root: Path, track: str, rec: Record) -> BenchmarkRow:
        sample_id = rec.text("id")
        raw = rec.get("options") or []
        options = [
            answers.strip_option_letter(o)
            for o in (raw.tolist() if hasattr(raw, "tolist") else raw)
            if str(o).strip()
        ]
        answer: Any = rec.text("answer")
        if options:
            kind, answer = "multiple_choice", letter_answer(rec, answer, len(options))
        elif answers.parse_number(answer) is not None:
            kind, answer = "numerical", answers.parse_number(answer)
        else:
            kind = "open_ended"
        row = BenchmarkRow(
            id=sample_id,
            problem=rec.text("question"),
            answer=answer,
            problem_type=kind,
            video=resolve_media(
                root, [f"{track}/{sample_id}.mp4", f"videos/{sample_id}.mp4", f"{sample_id}.mp4"]
            ),
            options=options or None,
            categories={"track": track, **_categories(sample_id)},
        )
        if track == "Adaptation":
            row.image = self._image(root, sample_id, rec)
        return row

    def _image(self, root: Path, sample_id: str, rec: Record) -> str:
        image = rec.get("image")
        target = root / "images" / f"{sample_id}.png"
        if isinstance(image, str) and image:
            return str(root / image)
        if isinstance(image, dict) and image.get("bytes") and not target.exists():
            from videorl.api import atomic_write_bytes

            atomic_write_bytes(target, bytes(image["bytes"]))
        elif isinstance(image, dict) and image.get("path") and (root / str(image["path"])).is_file():
            return str(root / str(image["path"]))
        return str(target)

    def adapt_unified(self, rec: Record, row: BenchmarkRow) -> BenchmarkRow:
        row.categories.update(_categories(Path(rec.text("path")).stem))
        if row.image:
            row.categories["track"] = "Adaptation"
        return row

    def official_prompt(self, row: BenchmarkRow, *, thinking: bool) -> str:
        parts = [row.problem, *(self.format_options(row.options) if row.options else [])]
        if row.image:
            kind = "multi-choice" if row.problem_type == "multiple_choice" else "open-ended"
            parts.insert(0, _ADAPTATION.format(kind=kind))
        else:
            parts.append(_IGNORE_QUIZ)
        if thinking:
            parts.append(thinking_ending(row.problem_type))
        return "\n".join(parts)
