"""The pass-rate filter: k rollouts of the base model per sample; keep the samples it sometimes solves.

A sample whose k responses all pass (pass rate 1) or all fail (0) gives GRPO groups with equal
rewards, which teach nothing; the seed's recipe keeps ``0 < pass rate < 1``. The pass rate of a
sample is the mean over its k responses of the reward's ``accuracy`` part (its whole score when the
reward has no such part), scored by the same prompts and rewards as training.

Progress is appended to ``<OUT>.progress.jsonl`` one sample at a time and flushed to disk
(:func:`videorl.eval.predictions.append_prediction`): a killed run continues with the samples not yet
done. The output, the kept rows in the input's schema (and order) with a ``pass_rate`` field, is
written atomically once every sample is done.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.atomic import write_output_text
from videorl.data import read_rows
from videorl.episode import Episode
from videorl.errors import DataError

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.data import Sample
    from videorl.encoding import Prompt
    from videorl.rewards.router import RewardRouter
    from videorl.rollout import RolloutEngine, SamplingParams

PROGRESS_SUFFIX = ".progress.jsonl"
_MEDIA_KEYS = ("videos", "video", "images", "image", "path")

__all__ = ["FilterSummary", "progress_path", "read_progress", "score_pass_rates", "write_kept_rows"]


def progress_path(out: str | Path) -> Path:
    """Where the per-sample results of a filter run writing ``out`` are appended."""
    out = Path(out)
    return out.with_name(out.name + PROGRESS_SUFFIX)


def read_progress(path: Path, k: int) -> dict[str, float]:
    """The pass rates already computed (``{}`` when there is no progress file yet).

    Results of another ``k`` are an error: the rates would not be comparable.
    """
    from videorl.eval.predictions import read_predictions

    if not path.is_file():
        return {}
    rates: dict[str, float] = {}
    for sample_id, record in read_predictions(path).items():
        if record.record.get("k") != k:
            raise DataError(
                f"{path}: sample {sample_id!r} was scored with k={record.record.get('k')}, this run asks "
                f"k={k}; use the same --k to continue, or another --out to start over"
            )
        rates[sample_id] = float(record.record["pass_rate"])
    return rates


def _chunks(items: Sequence[Sample], size: int) -> Iterator[Sequence[Sample]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def score_pass_rates(
    samples: Sequence[Sample],
    encode: Callable[[Sample], Prompt],
    engine: RolloutEngine,
    rewards: RewardRouter,
    backend: ModelBackend,
    params: SamplingParams,
    progress: Path,
    *,
    batch_size: int = 16,
    on_sample: Callable[[str, float], None] | None = None,
) -> dict[str, float]:
    """The pass rate of every sample over ``params.n`` responses, continuing ``progress``.

    Samples already in ``progress`` are skipped; each new result is appended (and fsynced) as soon
    as its batch of ``batch_size`` prompts is scored. Sampling seeds follow the position of each
    batch's first sample in ``samples`` (``params.seed`` plus that index).
    """
    from dataclasses import replace

    from videorl.eval.predictions import append_prediction
    from videorl.rollout.scoring import accuracy_of, score

    rates = read_progress(progress, params.n)
    known = {s.id for s in samples}
    rates = {i: r for i, r in rates.items() if i in known}
    position = {s.id: i for i, s in enumerate(samples)}
    todo = [s for s in samples if s.id not in rates]
    tokenizer = backend.processor.tokenizer
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    for chunk in _chunks(todo, batch_size):
        prompts = [encode(s) for s in chunk]
        seed = None if params.seed is None else params.seed + position[chunk[0].id]
        outputs = engine.generate([p.require_encoded() for p in prompts], replace(params, seed=seed))
        groups = [[Episode(p, g, c) for c in group] for g, (p, group) in enumerate(zip(prompts, outputs))]
        score(rewards, [t for group in groups for t in group], decode, backend.family)
        for sample, group in zip(chunk, groups):
            accuracies = [accuracy_of(t) for t in group]
            rate = sum(accuracies) / len(accuracies)
            append_prediction(
                progress,
                {
                    "id": sample.id,
                    "response": None,
                    "k": params.n,
                    "pass_rate": rate,
                    "accuracies": accuracies,
                },
            )
            rates[sample.id] = rate
            if on_sample is not None:
                on_sample(sample.id, rate)
    return rates


@dataclass
class FilterSummary:
    """What the filter found: how many samples, kept, always solved and never solved."""

    total: int
    kept: int
    all_pass: int
    all_fail: int


def _relocate(row: dict[str, Any], root: Path, out_dir: Path) -> dict[str, Any]:
    """``row`` with relative media paths rewritten to resolve from ``out_dir`` as they did from ``root``."""

    def move(value: Any) -> Any:
        if isinstance(value, list):
            return [move(v) for v in value]
        if not isinstance(value, str) or os.path.isabs(os.path.expanduser(value)):
            return value
        return os.path.relpath(os.path.join(root, value), out_dir)

    return {k: move(v) if k in _MEDIA_KEYS else v for k, v in row.items()}


def write_kept_rows(
    data: Path,
    samples: Sequence[Sample],
    rates: dict[str, float],
    out: Path,
    *,
    media_root: str | None = None,
) -> FilterSummary:
    """Write the rows of ``data`` whose sample has ``0 < pass rate < 1`` to ``out`` (JSONL, atomically):
    each row as it was, plus ``pass_rate``, with relative media paths made to resolve from ``out``'s
    folder (unless ``media_root`` names the folder they are relative to)."""

    rows = dict(read_rows(data))
    root = Path(media_root) if media_root is not None else data.absolute().parent
    out_dir = out.absolute().parent
    lines = []
    for sample in samples:
        rate = rates[sample.id]
        if 0.0 < rate < 1.0:
            row = rows[int(sample.origin.rsplit(":", 1)[1])]
            if media_root is None:
                row = _relocate(row, root, out_dir)
            lines.append(json.dumps({**row, "pass_rate": rate}, ensure_ascii=False) + "\n")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_output_text(out, "".join(lines))  # a device or a link written through, never replaced
    values = [rates[s.id] for s in samples]
    return FilterSummary(
        len(values), len(lines), sum(v >= 1.0 for v in values), sum(v <= 0.0 for v in values)
    )
