"""A run's history read back: its step-keyed JSONL rows (``metrics.jsonl``, ``completions.jsonl``), cut
at a resumed step, and the revision of the code that wrote them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from videorl.atomic import atomic_write_text
from videorl.errors import DataError


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl``; a torn last line (a writer killed mid-line) is left out.

    A malformed line elsewhere, or a row without an integer ``step``, is a :class:`DataError`
    naming the file and line.
    """
    path = Path(path)
    rows: list[dict[str, Any]] = []
    lines = path.read_text(encoding="utf-8").split("\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):  # the last line has no newline: it was being written
                break
            raise DataError(f"{path}:{number}: not a JSON object ({exc.msg})") from exc
        if not isinstance(row, dict) or not isinstance(row.get("step"), int) or isinstance(row["step"], bool):
            raise DataError(f"{path}:{number}: a metrics row must be a JSON object with an integer 'step'")
        rows.append(row)
    return rows


def truncate_after(path: Path, step: int) -> list[dict[str, Any]]:
    """Keep the rows of a step-keyed JSONL file up to ``step`` (rewriting it atomically when anything
    is dropped); the rows kept."""
    if not path.exists():
        return []
    rows = read_metrics(path)
    kept = [row for row in rows if row["step"] <= step]
    raw = path.read_text(encoding="utf-8")
    if len(kept) != len(rows) or (raw and not raw.endswith("\n")):
        atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in kept))
    return kept


def git_revision(directory: str | Path) -> dict[str, Any] | None:
    """``{"revision": sha, "dirty": bool}`` of the git checkout holding ``directory``, or ``None``."""
    try:
        sha = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if sha.returncode != 0:
            return None
        status = subprocess.run(
            ["git", "-C", str(directory), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {"revision": sha.stdout.strip(), "dirty": bool(status.stdout.strip())}
