"""Hook implementations: videorl calls these to learn what this plugin provides.

Targets are given as "module:attribute" strings so that nothing is imported until used.
"""

from videorl.api import Register, hookimpl

{% if cookiecutter.kind == "rewards" %}
#: further problem_type spellings of the reward (e.g. ["object counting", "how many"]; case, spaces,
#: hyphens and underscores are normalised away, so none is needed for those); its prompt templates
#: answer to them too
ALIASES: list[str] = []


@hookimpl
def register_rewards(register: Register) -> None:
    register(
        "{{ cookiecutter.underscored }}",
        "videorl_{{ cookiecutter.underscored }}.reward:ExactAnswerReward",
        aliases=ALIASES,
        description="{{ cookiecutter.description }}",
    )


@hookimpl
def register_prompt_templates(register: Register) -> None:
    from pathlib import Path

    from videorl.api import register_template_dir

    # templates/{{ cookiecutter.underscored }}.jinja and {{ cookiecutter.underscored }}.thinking.jinja (data.thinking: true)
    register_template_dir(
        register, Path(__file__).with_name("templates"), aliases={"{{ cookiecutter.underscored }}": ALIASES}
    )
{% else %}
@hookimpl
def register_benchmarks(register: Register) -> None:
    register(
        "{{ cookiecutter.underscored }}",
        "videorl_{{ cookiecutter.underscored }}.benchmark:JsonlBenchmark",
        description="{{ cookiecutter.description }}",
    )
{% endif %}
