"""Hook implementations of videorl-reward-counting."""

from videorl.api import Register, hookimpl


@hookimpl
def register_rewards(register: Register) -> None:
    register(
        "counting",
        "videorl_reward_counting.reward:CountingReward",
        aliases=["count", "object counting"],
        description="exact count in the last <answer>, digits or number words",
    )
