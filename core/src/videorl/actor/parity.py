"""The trainer-vs-engine log-prob gate of a training run, and the report both it and ``videorl models
check`` print.

:func:`first_step_check` (``rollout.parity_check``) compares, per modality, the engine's log-probs of a
run's first batch with the actor's before any update, and stops the run (or warns) beyond the tolerance
of the compute dtype. :func:`modality_gaps` is the same comparison the update logs every step
(``rollout/logprob_diff``). The probes of ``videorl models check`` live in
:mod:`videorl.diagnostics.models_check`, which the update never imports.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from videorl.actor.gaps import ModalityGap, modality_gaps
from videorl.errors import VideorlError

if TYPE_CHECKING:
    from videorl.actor.policy import Actor
    from videorl.config import TrainConfig
    from videorl.episode import Episode
    from videorl.parallel import Parallel

log = logging.getLogger("videorl.diagnostics.models_check")

PASS, FAIL, NA = "PASS", "FAIL", "n/a"


class ParityError(VideorlError):
    """The rollout engine and the trainer disagree beyond the tolerance."""


@dataclass(frozen=True)
class Tolerance:
    """How far engine and trainer log-probs may differ: ``token`` per token (``models check``),
    ``mean`` over a modality's tokens (the training run's first-step check)."""

    token: float
    mean: float


#: Defaults per compute dtype. Measured on the tiny models on CPU (docs/models.md), the largest
#: per-token differences are 4.8e-7 in float32 and 3.4e-3 in bfloat16; real checkpoints on GPUs,
#: other kernels and MoE routing differ more, so the limits leave room (x2000 in float32, x70 in
#: bfloat16) rather than stop sound runs. The exact checks (ids, grids, metadata, positions) do not
#: depend on them.
TOLERANCES: dict[str, Tolerance] = {
    "float32": Tolerance(token=1e-3, mean=1e-4),
    "bfloat16": Tolerance(token=0.25, mean=0.05),
    "float16": Tolerance(token=0.1, mean=0.02),
}


def tolerance_for(dtype: str, token: float | None = None) -> Tolerance:
    """The tolerance of ``dtype``; ``token`` (a user's value) replaces both limits' scale."""
    base = TOLERANCES[dtype]
    if token is None:
        return base
    return Tolerance(token=token, mean=token * base.mean / base.token)


@dataclass
class CheckResult:
    """One check of one probe sample: its status, the first differing position and both sides' values."""

    sample: str
    check: str
    status: str  # PASS, FAIL or n/a
    position: int | None = None
    trainer: Any = None
    engine: Any = None
    cause: str = ""

    @property
    def failed(self) -> bool:
        return self.status == FAIL


@dataclass
class ParityReport:
    """The results of ``videorl models check`` (or of a run's first-step check)."""

    model: str
    engine: str
    dtype: str
    tolerance: Tolerance
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(r.failed for r in self.results)

    def add(self, result: CheckResult) -> None:
        self.results.append(result)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "engine": self.engine,
            "dtype": self.dtype,
            "ok": self.ok,
            "tolerance": asdict(self.tolerance),
            "results": [asdict(r) for r in self.results],
        }

    def table(self, *, mean: bool = False) -> str:
        """A fixed-width PASS/FAIL table, one row per sample and check, then a summary line (which
        states the ``mean`` limit for the training check's rows, one per modality)."""
        header = ("sample", "check", "result", "position", "trainer", "engine", "likely cause")
        rows = [
            (
                r.sample,
                r.check,
                r.status,
                "" if r.position is None else str(r.position),
                short_value(r.trainer),
                short_value(r.engine),
                r.cause,
            )
            for r in self.results
        ]
        widths = [
            max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(header)
        ]
        widths[-1] = 0  # the cause is last and not padded
        lines = ["  ".join(c.ljust(w) for c, w in zip(header, widths)).rstrip()]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
        failed = sum(r.failed for r in self.results)
        lines.append(
            f"{self.model} with the {self.engine} engine in {self.dtype} (log-prob tolerance "
            + (
                f"{self.tolerance.mean:g} mean per modality): "
                if mean
                else f"{self.tolerance.token:g} per token): "
            )
            + ("PASS" if not failed else f"FAIL ({failed} of {len(self.results)} checks)")
        )
        return "\n".join(lines)


def short_value(value: Any, limit: int = 36) -> str:
    if value is None:
        return ""
    text = f"{value:.6g}" if isinstance(value, float) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_step_check(
    config: TrainConfig, actor: Actor, trajectories: Sequence[Episode], dist: Parallel
) -> dict[str, float]:
    """``rollout.parity_check``: the engine's log-probs of this first batch against the actor's, per
    modality (before any update). Beyond the tolerance of ``model.dtype`` (or
    ``rollout.parity_tolerance``): :class:`ParityError` with the table (``first_step``), or a warning
    (``warn``). Every rank runs it (the forwards are collectives under FSDP) and decides alike."""
    import torch

    from videorl.actor.update import forward_responses, micro_batches

    forbidden = sorted(actor.backend.forbidden_token_ids() | set(config.model.suppress_token_ids))
    gaps: dict[str, ModalityGap] = {}
    with torch.no_grad():
        for batch in micro_batches(trajectories, config.actor.max_tokens_per_micro_batch, dist):
            logp, _, _ = forward_responses(actor.model, actor.backend, batch, forbidden, actor.compute_dtype)
            for kind, gap in modality_gaps(batch, logp).items():
                mine = gaps.setdefault(kind, ModalityGap())
                mine.total, mine.count = mine.total + gap.total, mine.count + gap.count
                if gap.worst > mine.worst:
                    mine.worst, mine.where = gap.worst, gap.where
    kinds = ("video", "image", "text")
    sums = dist.all_reduce(
        torch.tensor(
            [
                v
                for k in kinds
                for v in (gaps.get(k, ModalityGap()).total, float(gaps.get(k, ModalityGap()).count))
            ]
        )
    )
    worst = dist.all_reduce(torch.tensor([gaps.get(k, ModalityGap()).worst for k in kinds]), op="max")
    tolerance = tolerance_for(config.model.dtype, config.rollout.parity_tolerance)
    report = ParityReport(config.model.path, config.rollout.engine, config.model.dtype, tolerance)
    metrics: dict[str, float] = {}
    for i, kind in enumerate(kinds):
        total, count = float(sums[2 * i]), int(sums[2 * i + 1])
        if not count:
            continue
        mean = total / count
        metrics[f"parity/logprob_diff/{kind}"] = mean
        report.add(
            CheckResult(
                kind,
                "logprobs (mean)",
                PASS if mean <= tolerance.mean else FAIL,
                trainer=f"mean |diff| {mean:.3g}",
                engine=f"max |diff| {float(worst[i]):.3g}, {count} tokens",
                cause=""
                if mean <= tolerance.mean
                else (gaps[kind].where if kind in gaps else "on another rank"),
            )
        )
    if not report.ok:
        command = f"videorl models check {config.model.path} --engine {config.rollout.engine} --config CONFIG"
        text = (
            f"the rollout engine's log-probs differ from the actor's on the first batch (mean tolerance "
            f"{tolerance.mean:g} for {config.model.dtype}):\n{report.table(mean=True)}\nInvestigate with "
            f"`{command}`; "
            "set rollout.parity_check=warn to train anyway, or rollout.parity_tolerance to another limit."
        )
        if config.rollout.parity_check == "first_step":
            raise ParityError(text)
        log.warning("%s", text)
    return metrics
