"""Hook implementations: videorl calls these to learn what this plugin provides.

Targets are given as "module:attribute" strings so that nothing is imported until used.
"""

from videorl.api import Register, hookimpl

{% if cookiecutter.kind == "rewards" %}
@hookimpl
def register_rewards(register: Register) -> None:
    register(
        "{{ cookiecutter.underscored }}",
        "videorl_{{ cookiecutter.underscored }}.reward:ExactAnswerReward",
        aliases=["{{ cookiecutter.plugin_name }}"],
        description="{{ cookiecutter.description }}",
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
