"""Hook implementations of videorl-algorithm-gmpo: the loss and a preset that uses it."""

from __future__ import annotations

from videorl.api import Preset, Register, hookimpl

GMPO = Preset({"adv_estimator": "grpo", "policy_loss": "gmpo"}, "GMPO: geometric mean of the clipped ratios")


@hookimpl
def register_policy_losses(register: Register) -> None:
    register("gmpo", "videorl_algorithm_gmpo.loss:GMPOLoss", description="geometric mean of clipped ratios")


@hookimpl
def register_algorithm_presets(register: Register) -> None:
    register("gmpo", "videorl_algorithm_gmpo.plugin:GMPO", description="GRPO advantages, GMPO loss")
