"""The built-in advantage estimators, policy losses and presets (registered by :mod:`videorl.builtin`).

Each component is a dataclass whose fields are its options; the formulas live in
:mod:`videorl.algorithms.formulas`.
"""

# ruff: noqa: RUF009 - option() returns dataclasses.field(...), with the help text in its metadata
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from videorl.algorithms import LossScale, Preset
from videorl.algorithms import formulas as algo
from videorl.config import option

# --- advantage estimators -------------------------------------------------------------------------


@dataclass
class GRPOEstimator:
    """GRPO: ``(r - group mean) / (group std + eps)``."""

    norm_adv_by_std: bool = option(True, "Divide by the group's standard deviation (false: Dr. GRPO).")
    adv_eps: float = option(1e-6, "Added to the group standard deviation.")

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        return algo.grpo_advantages(rewards, eps=self.adv_eps, norm_by_std=self.norm_adv_by_std)


@dataclass
class RLOOEstimator:
    """RLOO: each reward minus the mean of the other rewards of its group."""

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        return algo.rloo_advantages(rewards)


@dataclass
class ReinforcePlusPlusEstimator:
    """REINFORCE++: rewards whitened over the whole batch (of this rank)."""

    adv_eps: float = option(1e-6, "Added to the batch standard deviation.")
    group_baseline: bool = option(False, "Subtract each group's mean reward first (REINFORCE++-baseline).")

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        return algo.batch_whitened_advantages(rewards, eps=self.adv_eps, group_baseline=self.group_baseline)


@dataclass
class ReMaxEstimator:
    """ReMax: each sampled reward minus the reward of the prompt's greedy response."""

    #: the rollout layer adds one greedy (temperature 0) response per prompt, last in its group,
    #: never trained on
    greedy_baseline: ClassVar[bool] = True

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        return algo.remax_advantages(rewards)


# --- policy losses --------------------------------------------------------------------------------


def _denominator(mode: str, scale: LossScale) -> float:
    if mode == "token-mean":
        return scale.tokens
    if mode == "seq-mean-token-sum-norm":
        return scale.responses * scale.max_response_length
    return scale.responses


@dataclass
class PPOClipLoss:
    """The PPO clipped surrogate, with DAPO's decoupled (clip-higher) range."""

    clip_low: float = option(0.2, "Ratio clip below: 1 - clip_low.")
    clip_high: float = option(0.28, "Ratio clip above: 1 + clip_high (DAPO clip-higher).")
    loss_agg_mode: algo.LossAggMode = option(
        "token-mean",
        "token-mean | seq-mean-token-mean | seq-mean-token-sum-norm (Dr. GRPO: sum / (responses × "
        "rollout.max_response_length)).",
    )

    def __post_init__(self) -> None:
        if self.loss_agg_mode not in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
            raise ValueError(
                f"loss_agg_mode must be token-mean, seq-mean-token-mean or seq-mean-token-sum-norm, "
                f"got {self.loss_agg_mode!r}"
            )

    def loss(
        self, log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
        mask: torch.Tensor, scale: LossScale,
    ) -> algo.PolicyLoss:  # fmt: skip
        return algo.policy_loss(
            log_probs, old_log_probs, advantages, mask, clip_low=self.clip_low, clip_high=self.clip_high,
            mode=self.loss_agg_mode, denominator=_denominator(self.loss_agg_mode, scale),
        )  # fmt: skip


@dataclass
class GSPOLoss:
    """GSPO: the clip on the length-normalised sequence ratio; the mean over responses."""

    clip_low: float = option(3e-4, "Sequence-ratio clip below: 1 - clip_low.")
    clip_high: float = option(4e-4, "Sequence-ratio clip above: 1 + clip_high.")
    token_level: bool = option(False, "GSPO-token: the sequence ratio with a per-token gradient.")

    def loss(
        self, log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
        mask: torch.Tensor, scale: LossScale,
    ) -> algo.PolicyLoss:  # fmt: skip
        return algo.gspo_loss(
            log_probs, old_log_probs, advantages, mask, clip_low=self.clip_low, clip_high=self.clip_high,
            token_level=self.token_level, denominator=scale.responses,
        )  # fmt: skip


@dataclass
class CISPOLoss:
    """CISPO: the clipped, detached importance weight times the log-prob."""

    clip_low: float = option(1.0, "Weight clip below: 1 - clip_low (1: no lower bound, as MiniMax-M1).")
    clip_high: float = option(0.28, "Weight clip above: 1 + clip_high.")
    loss_agg_mode: algo.LossAggMode = option("token-mean", "As for ppo_clip.")

    def loss(
        self, log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
        mask: torch.Tensor, scale: LossScale,
    ) -> algo.PolicyLoss:  # fmt: skip
        return algo.cispo_loss(
            log_probs, old_log_probs, advantages, mask, clip_low=self.clip_low, clip_high=self.clip_high,
            mode=self.loss_agg_mode, denominator=_denominator(self.loss_agg_mode, scale),
        )  # fmt: skip


# --- presets --------------------------------------------------------------------------------------

GRPO = Preset(
    {"adv_estimator": "grpo", "policy_loss": "ppo_clip"}, "GRPO with DAPO clip-higher (the default)"
)
DR_GRPO = Preset(
    {
        "adv_estimator": "grpo",
        "policy_loss": "ppo_clip",
        "estimator_options": {"norm_adv_by_std": False},
        "loss_options": {"loss_agg_mode": "seq-mean-token-sum-norm"},
    },
    "Dr. GRPO: no std division, constant loss normaliser",
)
DAPO = Preset(
    {
        "adv_estimator": "grpo",
        "policy_loss": "ppo_clip",
        "loss_options": {"clip_low": 0.2, "clip_high": 0.28, "loss_agg_mode": "token-mean"},
        "dynamic_sampling": True,
        "overlong_buffer": 512,
    },
    "DAPO: clip-higher, token-level loss, dynamic sampling, overlong shaping",
)
GSPO = Preset({"adv_estimator": "grpo", "policy_loss": "gspo"}, "GSPO: sequence-level ratio and clip")
GSPO_TOKEN = Preset(
    {"adv_estimator": "grpo", "policy_loss": "gspo", "loss_options": {"token_level": True}},
    "GSPO-token: the sequence ratio with per-token gradients",
)
CISPO = Preset(
    {"adv_estimator": "grpo", "policy_loss": "cispo"}, "CISPO: clipped importance-weight REINFORCE"
)
RLOO = Preset({"adv_estimator": "rloo", "policy_loss": "ppo_clip"}, "RLOO: leave-one-out baseline")
REMAX = Preset(
    {"adv_estimator": "remax", "policy_loss": "ppo_clip"}, "ReMax: the greedy response's reward as baseline"
)
REINFORCE_PP = Preset(
    {"adv_estimator": "reinforce_pp", "policy_loss": "ppo_clip"}, "REINFORCE++: batch-normalised advantages"
)
REINFORCE_PP_BASELINE = Preset(
    {
        "adv_estimator": "reinforce_pp",
        "policy_loss": "ppo_clip",
        "estimator_options": {"group_baseline": True},
    },
    "REINFORCE++-baseline: group mean subtracted, then batch-normalised",
)
