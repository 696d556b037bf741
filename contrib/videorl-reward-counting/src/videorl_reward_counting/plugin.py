"""Hook implementations of videorl-reward-counting: the reward and its prompt templates."""

from pathlib import Path

from videorl.api import Register, hookimpl

#: further problem_type spellings of the reward; its templates answer to them too
ALIASES = ["count", "object counting"]


@hookimpl
def register_rewards(register: Register) -> None:
    register(
        "counting",
        "videorl_reward_counting.reward:CountingReward",
        aliases=ALIASES,
        description="exact count in the last <answer>, digits or number words",
    )


@hookimpl
def register_prompt_templates(register: Register) -> None:
    from videorl.api import register_template_dir

    # counting.jinja (non-thinking) and counting.thinking.jinja (data.thinking: true)
    register_template_dir(register, Path(__file__).with_name("templates"), aliases={"counting": ALIASES})
