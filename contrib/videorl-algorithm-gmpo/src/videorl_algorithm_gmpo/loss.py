"""GMPO: the geometric mean of the per-token clipped importance ratios (Zhao et al. 2025)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from videorl.api import LossScale, PolicyLoss


@dataclass
class GMPOLoss:
    """``-A · exp(mean_t sgn(A)·min(sgn(A)·δ_t, sgn(A)·clip(δ_t, -ε_low, ε_high)))`` per response."""

    log_clip_low: float = field(default=0.4, metadata={"help": "Log-ratio clip below: -log_clip_low."})
    log_clip_high: float = field(default=0.4, metadata={"help": "Log-ratio clip above: log_clip_high."})

    def loss(
        self,
        log_probs: torch.Tensor,
        old_log_probs: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        scale: LossScale,
    ) -> PolicyLoss:
        valid = mask.to(log_probs.dtype)
        lengths = valid.sum(dim=-1).clamp(min=1)
        per_token = advantages.unsqueeze(-1).expand_as(log_probs) if advantages.dim() == 1 else advantages
        # the sequence's advantage: per-token advantages (rollout correction's weights) average over it
        seq_advantage = (per_token * valid).sum(dim=-1) / lengths
        sign = torch.sign(seq_advantage).unsqueeze(-1)
        log_ratio = (log_probs - old_log_probs) * valid  # 0 at padding: no gradient there
        clipped = torch.clamp(log_ratio, -self.log_clip_low, self.log_clip_high)  # the paper's ratio range
        chosen = sign * torch.minimum(sign * log_ratio, sign * clipped)  # the pessimistic term, as PPO's min
        # bounded before exp: a sum of log-ratios past 88.7 would overflow (and NaN the gradient)
        seq_ratio = torch.exp(torch.clamp((chosen * valid).sum(dim=-1) / lengths, -20.0, 20.0))
        loss = (-seq_advantage * seq_ratio).sum() / max(scale.responses, 1.0)
        count = valid.sum().clamp(min=1)
        with torch.no_grad():
            changed = (chosen != log_ratio) & (sign != 0)
            clip_fraction = (changed.to(valid.dtype) * valid).sum() / count
            approx_kl = (-log_ratio * valid).sum() / count
        return PolicyLoss(loss, clip_fraction, approx_kl)
