"""Hook implementations of videorl-algorithm-gmpo: the loss and a preset that uses it.

videorl ships GMPO as the built-ins ``gmpo`` (loss and preset); this example registers its own copy
under other names, since a plugin component named like a built-in would collide with it (both fail on
use), never silently replace it.
"""

from __future__ import annotations

from videorl.api import Preset, Register, hookimpl

GMPO_EXAMPLE = Preset(
    {"adv_estimator": "grpo", "policy_loss": "gmpo_example"},
    "GMPO from the example plugin: geometric mean of the clipped ratios",
)


@hookimpl
def register_policy_losses(register: Register) -> None:
    register(
        "gmpo_example", "videorl_algorithm_gmpo.loss:GMPOLoss",
        description="geometric mean of clipped ratios (example plugin; built in as gmpo)",
    )  # fmt: skip


@hookimpl
def register_algorithm_presets(register: Register) -> None:
    register(
        "gmpo_example", "videorl_algorithm_gmpo.plugin:GMPO_EXAMPLE",
        description="GRPO advantages, the example plugin's GMPO loss",
    )  # fmt: skip
