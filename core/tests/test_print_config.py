"""``videorl train CONFIG --print-config`` checks the rewards section as training would, without a dataset
or a model: an unknown reward, route or option is an error, not a printed config."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from videorl.testing import CliResult

RunCli = Callable[..., CliResult]


def _config(tmp_path: Path, rewards: str) -> Path:
    path = tmp_path / "train.yaml"
    path.write_text(f"model:\n  path: {tmp_path / 'model'}\ndata:\n  train_files: [train.jsonl]\n{rewards}")
    return path


@pytest.mark.parametrize(
    ("rewards", "message"),
    [
        ("rewards:\n  options:\n    numerical:\n      tolerence: 0.1\n", "takes no option 'tolerence'"),
        (
            "rewards:\n  routes:\n    counting: numerical_typo\n",
            "names reward 'numerical_typo', which is not registered",
        ),
        (
            "rewards:\n  options:\n    no_such_reward: {}\n",
            "names reward 'no_such_reward', which is not registered",
        ),
    ],
)
def test_print_config_rejects_a_bad_rewards_section(
    run_cli: RunCli, tmp_path: Path, rewards: str, message: str
) -> None:
    config = _config(tmp_path, rewards)
    result = run_cli("train", str(config), "--print-config")
    assert result.exit_code != 0 and result.exception is None
    assert message in result.stderr and str(config) in result.stderr
    assert "rewards:" not in result.output  # nothing printed


def test_print_config_prints_a_good_one(run_cli: RunCli, tmp_path: Path) -> None:
    config = _config(tmp_path, "rewards:\n  routes:\n    counting: numerical\n")
    result = run_cli("train", str(config), "--print-config").assert_success()
    assert "counting" in result.output and "numerical" in result.output
