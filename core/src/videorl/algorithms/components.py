"""The built-in advantage estimators, policy losses and presets (registered by :mod:`videorl.builtin`).

Each component is a dataclass whose fields are its options; the formulas live in
:mod:`videorl.algorithms.formulas`.
"""

# ruff: noqa: RUF009 - option() returns dataclasses.field(...), with the help text in its metadata
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import torch

from videorl.algorithms import LossScale, Preset, StepRewards
from videorl.algorithms import advantages as adv
from videorl.algorithms import formulas as algo
from videorl.config import option

#: GDPO's reward components at most (each one a (G, n) tensor built from the episodes' parts)
MAX_REWARD_COMPONENTS = 64

# --- advantage estimators -------------------------------------------------------------------------


def _check_whiten_over(value: str) -> None:
    if value not in ("tokens", "responses"):
        raise ValueError(f"whiten_over must be tokens or responses, got {value!r}")


@dataclass
class GRPOEstimator:
    """GRPO: ``(r - group mean) / (group std + eps)``."""

    norm_adv_by_std: bool = option(True, "Divide by the group's standard deviation (false: Dr. GRPO).")
    adv_eps: float = option(1e-6, "Added to the group standard deviation.")

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        return adv.grpo_advantages(rewards, eps=self.adv_eps, norm_by_std=self.norm_adv_by_std)


@dataclass
class RLOOEstimator:
    """RLOO: each reward minus the mean of the other rewards of its group."""

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        return adv.rloo_advantages(rewards)


@dataclass
class ReinforcePlusPlusEstimator:
    """REINFORCE++: rewards whitened over the whole batch (of this rank), by default over its tokens."""

    adv_eps: float = option(1e-6, "Added to the batch standard deviation.")
    group_baseline: bool = option(False, "Subtract each group's mean reward first (REINFORCE++-baseline).")
    whiten_over: adv.WhitenOver = option(
        "tokens",
        "tokens: mean and std over the batch's tokens, each response weighing its length (the paper's "
        "eq. 10, veRL, EasyR1); responses: over the batch's responses, one each.",
    )

    def __post_init__(self) -> None:
        _check_whiten_over(self.whiten_over)

    def estimate(self, step: StepRewards) -> torch.Tensor:
        lengths = step.lengths if self.whiten_over == "tokens" else None
        return adv.reinforce_pp_advantages(
            step.rewards, lengths, eps=self.adv_eps, group_baseline=self.group_baseline
        )


@dataclass
class GDPOEstimator:
    """GDPO: each reward component group-normalised on its own, weighted, summed, batch-whitened."""

    reward_weights: dict[str, float] = option(
        factory=lambda: {"accuracy": 1.0, "format": 1.0},
        help="The reward's components (keys of its parts) to normalise one by one, and each one's weight "
        "in the sum.",
    )
    adv_eps: float = option(1e-6, "Added to each group standard deviation and to the batch's.")
    whiten_over: adv.WhitenOver = option(
        "responses",
        "responses: whiten the sum over the batch's responses (the paper, TRL); tokens: over its tokens "
        "(veRL's gdpo).",
    )

    def __post_init__(self) -> None:
        _check_whiten_over(self.whiten_over)
        weights = self.reward_weights
        if not isinstance(weights, Mapping) or not 0 < len(weights) <= MAX_REWARD_COMPONENTS:
            raise ValueError(
                f"reward_weights must map 1 to {MAX_REWARD_COMPONENTS} reward parts to weights, "
                f"got {weights!r}"
            )
        for key, w in weights.items():
            if not isinstance(key, str) or isinstance(w, bool) or not isinstance(w, int | float):
                raise ValueError(f"reward_weights: {key!r}: {w!r} is not a part name with a number")
            if not math.isfinite(w):
                raise ValueError(f"reward_weights: {key!r} has the weight {w}, not a finite number")

    def estimate(self, step: StepRewards) -> torch.Tensor:
        shape = tuple(step.rewards.shape)
        components = torch.stack([_component(step, key, shape) for key in self.reward_weights])
        weights = torch.tensor([float(w) for w in self.reward_weights.values()])
        lengths = step.lengths if self.whiten_over == "tokens" else None
        return adv.gdpo_advantages(components, weights, eps=self.adv_eps, lengths=lengths)


def _component(step: StepRewards, key: str, shape: tuple[int, ...]) -> torch.Tensor:
    """Part ``key`` of every response ``(G, n)``; 0 where a response's reward has no such part (a reward
    that failed or abstained scores 0 with no parts), an error where none has it or a value is not finite."""
    if len(step.parts) != shape[0] or any(len(row) != shape[1] for row in step.parts):
        raise ValueError(f"the step's parts are not shaped as its rewards {shape}")
    values = torch.zeros(shape, dtype=torch.float32)
    found = False
    for g, row in enumerate(step.parts):
        for j, parts in enumerate(row):
            if key in parts:
                value = float(parts[key])
                if not math.isfinite(value):
                    raise ValueError(f"gdpo: the reward part {key!r} of response {j} of group {g} is {value}")
                values[g, j] = value
                found = True
    if not found:
        seen = sorted({k for row in step.parts for parts in row for k in parts})
        raise ValueError(
            f"gdpo: no response of this step has the reward part {key!r} (parts seen: "
            f"{', '.join(seen) or 'none'}); set algorithm.estimator_options.reward_weights to parts your "
            "reward returns"
        )
    return values


@dataclass
class ReMaxEstimator:
    """ReMax: each sampled reward minus the reward of the prompt's greedy response."""

    #: the rollout layer adds one greedy (temperature 0) response per prompt, last in its group,
    #: never trained on
    greedy_baseline: ClassVar[bool] = True

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        return adv.remax_advantages(rewards)


# --- policy losses --------------------------------------------------------------------------------

_AGG_HELP = (
    "token-mean | seq-mean-token-mean | seq-mean-token-sum | seq-mean-token-sum-norm (Dr. GRPO: sum / "
    "(responses × rollout.max_response_length)); the KL and entropy terms use it too."
)


def _check_mode(mode: str) -> None:
    if mode not in algo.LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode must be {', '.join(algo.LOSS_AGG_MODES)}; got {mode!r}")


@dataclass
class PPOClipLoss:
    """The PPO clipped surrogate, with DAPO's decoupled (clip-higher) range and an optional dual clip."""

    clip_low: float = option(0.2, "Ratio clip below: 1 - clip_low.")
    clip_high: float = option(0.28, "Ratio clip above: 1 + clip_high (DAPO clip-higher).")
    loss_agg_mode: algo.LossAggMode = option("token-mean", _AGG_HELP)
    clip_ratio_c: float | None = option(
        None,
        "Dual clip (Ye et al. 2020): where A < 0, a token's loss is at most -A·clip_ratio_c (> 1; veRL "
        "and EasyR1 use 3.0); null: off.",
    )

    def __post_init__(self) -> None:
        _check_mode(self.loss_agg_mode)
        if self.clip_ratio_c is not None and not self.clip_ratio_c > 1:
            raise ValueError(f"clip_ratio_c must be > 1 (or null: off), got {self.clip_ratio_c}")

    def loss(
        self, log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
        mask: torch.Tensor, scale: LossScale,
    ) -> algo.PolicyLoss:  # fmt: skip
        return algo.policy_loss(
            log_probs, old_log_probs, advantages, mask, clip_low=self.clip_low, clip_high=self.clip_high,
            clip_ratio_c=self.clip_ratio_c, mode=self.loss_agg_mode,
            denominator=algo.denominator(self.loss_agg_mode, scale),
        )  # fmt: skip


@dataclass
class GSPOLoss:
    """GSPO: the clip on the length-normalised sequence ratio; the mean over responses."""

    #: how the update reduces the KL and entropy terms alongside this loss
    loss_agg_mode: ClassVar[algo.LossAggMode] = "seq-mean-token-mean"

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

    def __post_init__(self) -> None:
        _check_mode(self.loss_agg_mode)

    def loss(
        self, log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
        mask: torch.Tensor, scale: LossScale,
    ) -> algo.PolicyLoss:  # fmt: skip
        return algo.cispo_loss(
            log_probs, old_log_probs, advantages, mask, clip_low=self.clip_low, clip_high=self.clip_high,
            mode=self.loss_agg_mode, denominator=algo.denominator(self.loss_agg_mode, scale),
        )  # fmt: skip


@dataclass
class GMPOLoss:
    """GMPO: the geometric mean of a response's token ratios, each clipped in log space."""

    loss_agg_mode: ClassVar[algo.LossAggMode] = "seq-mean-token-mean"  # for the KL and entropy terms

    clip_low: float = option(0.4, "Log-ratio clip below: -clip_low (the paper's 0.4: ratio e^-0.4).")
    clip_high: float = option(0.4, "Log-ratio clip above: clip_high (the paper's 0.4: ratio e^0.4).")

    def loss(
        self, log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
        mask: torch.Tensor, scale: LossScale,
    ) -> algo.PolicyLoss:  # fmt: skip
        return algo.gmpo_loss(
            log_probs, old_log_probs, advantages, mask, clip_low=self.clip_low, clip_high=self.clip_high,
            denominator=scale.responses,
        )  # fmt: skip


@dataclass
class SAPOLoss:
    """SAPO: a sigmoid gate on the ratio, with its own temperature for each sign of the advantage."""

    tau_pos: float = option(1.0, "Gate temperature where A > 0 (the paper's 1.0).")
    tau_neg: float = option(1.05, "Gate temperature where A <= 0 (the paper's 1.05; > tau_pos fades faster).")
    loss_agg_mode: algo.LossAggMode = option("token-mean", "As for ppo_clip.")

    def __post_init__(self) -> None:
        _check_mode(self.loss_agg_mode)
        if not (self.tau_pos > 0 and self.tau_neg > 0):
            raise ValueError(f"tau_pos and tau_neg must be > 0, got {self.tau_pos} and {self.tau_neg}")

    def loss(
        self, log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
        mask: torch.Tensor, scale: LossScale,
    ) -> algo.PolicyLoss:  # fmt: skip
        return algo.sapo_loss(
            log_probs, old_log_probs, advantages, mask, tau_pos=self.tau_pos, tau_neg=self.tau_neg,
            mode=self.loss_agg_mode, denominator=algo.denominator(self.loss_agg_mode, scale),
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
GDPO = Preset(
    {"adv_estimator": "gdpo", "policy_loss": "ppo_clip"},
    "GDPO: each reward component group-normalised on its own (accuracy, format)",
)
GMPO = Preset({"adv_estimator": "grpo", "policy_loss": "gmpo"}, "GMPO: geometric mean of the clipped ratios")
SAPO = Preset(
    {"adv_estimator": "grpo", "policy_loss": "sapo"}, "SAPO: a soft sigmoid gate instead of the clip"
)
