"""How far the engine's log-probs of sampled tokens are from the actor's, per modality of the prompts:
what the update logs every step (``rollout/logprob_diff``) and the first-step parity gate checks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from videorl.episode import Episode


@dataclass
class ModalityGap:
    """|engine − actor| log-prob statistics of one modality's sampled tokens, and its worst token."""

    total: float = 0.0
    count: int = 0
    worst: float = 0.0
    where: str = ""

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0


def modality_gaps(batch: Sequence[Episode], logp: torch.Tensor) -> dict[str, ModalityGap]:
    """Per modality of the prompts (video, image, text): the engine-vs-actor gaps of ``batch``'s
    sampled tokens (``logp``: the actor's, ``B×R``); offline responses carry no engine log-probs."""
    import torch

    gaps: dict[str, ModalityGap] = {}
    for row, t in enumerate(batch):
        engine = t.response_logprobs
        if not engine or not t.has_engine_logprobs:
            continue
        diff = (logp[row, : len(engine)].detach().float().cpu() - torch.tensor(engine)).abs()
        if t.loss_mask is not None:  # the policy's tokens only: the environment's have no engine log-prob
            diff = diff.nan_to_num(0.0) * torch.tensor(t.loss_mask, dtype=diff.dtype)
        gap = gaps.setdefault(t.prompt.require_encoded().prompt.data_type, ModalityGap())
        gap.total += float(diff.sum())
        gap.count += len(engine) if t.loss_mask is None else sum(t.loss_mask)
        j = int(diff.argmax())
        if float(diff[j]) > gap.worst:
            gap.worst = float(diff[j])
            gap.where = (
                f"sample {t.prompt.sample.id!r} token {j}: engine {engine[j]:.5g}, "
                f"actor {float(logp[row, j].detach()):.5g}"
            )
    return gaps
