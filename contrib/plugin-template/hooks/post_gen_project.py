"""Keep only the module of the chosen kind."""

from pathlib import Path

KIND = "{{ cookiecutter.kind }}"
package = Path("src") / "videorl_{{ cookiecutter.underscored }}"
unused = {"rewards": "benchmark.py", "benchmarks": "reward.py"}[KIND]
(package / unused).unlink()
if KIND != "rewards":  # the prompt templates belong to the reward kind
    import shutil

    shutil.rmtree(package / "templates")
