"""``videorl reward``: scoring JSONL rows, bad rows by line number, config, atomic output."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from videorl.api import hookimpl
from videorl.rewards import RewardInput, RewardOutput, TaskReward


class ExactReward(TaskReward):
    name = "exact"

    def accuracy(self, answer: Any, truth: Any, inp: RewardInput) -> float:
        return float(answer == truth)


class PositionReward(TaskReward):
    """The share of positions answered right; as the plugin template, it declares its own defaults."""

    name = "event_ordering"

    def __init__(
        self, *, accuracy_weight: float = 1.0, format_weight: float = 0.0, fallback: bool = False, **kw: Any
    ) -> None:
        super().__init__(
            accuracy_weight=accuracy_weight, format_weight=format_weight, fallback=fallback, **kw
        )

    def accuracy(self, answer: Any, truth: Any, inp: RewardInput) -> float:
        return sum(a == b for a, b in zip(answer, truth, strict=False)) / len(truth)


class Boom:
    def __call__(self, inp: RewardInput) -> RewardOutput:
        raise ValueError("reward bug")


class Abstain:
    def __call__(self, inp: RewardInput) -> None:
        return None


class RewardPlugin:
    @staticmethod
    @hookimpl
    def register_rewards(register: Any) -> None:
        register("exact", ExactReward, aliases=["exact match"])
        register("boom", Boom)
        register("event_ordering", PositionReward, aliases=["ordering"])
        register("abstain", Abstain)


@pytest.fixture
def cli(fake_entry_points: Any, run_cli: Any) -> Any:
    fake_entry_points({"videorl-testrewards": RewardPlugin})
    return run_cli


def write_rows(path: Path, rows: list[Any]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_scores_and_parts(cli: Any, tmp_path: Path) -> None:
    rows = write_rows(
        tmp_path / "rows.jsonl",
        [
            {"id": "a", "problem_type": "Exact Match", "answer": "<answer>cat</answer>",
             "responses": ["<answer>cat</answer>", "<answer>dog</answer>", "cat"]},
            {"sample": {"id": "b", "problem_type": "exact", "solution": "x"},
             "response": "<think>t</think><answer>x</answer>"},
            {"id": "c", "problem_type": "abstain", "answer": 1, "response": "r"},
        ],
    )  # fmt: skip
    out = tmp_path / "scored.jsonl"
    result = cli("reward", "--input", str(rows), "--output", str(out)).assert_success()
    scored = read_rows(out)
    assert [r["scores"] for r in scored] == [[1.0, 0.1, 0.9], [1.0], [None]]
    assert scored[0]["parts"][1] == {"accuracy": 0.0, "format": 1.0}
    assert scored[2]["parts"] == [{}]
    assert scored[1]["sample"]["id"] == "b" and "errors" not in scored[0]
    assert "scored 5 response(s) in 3 row(s)" in result.stderr
    # "Exact Match" and "exact" are one reward: one line under its name
    assert "  exact: 4 scored, mean 0.7500 (0.9·accuracy + 0.1·format, fallback on)" in result.stderr


def test_bad_rows_are_reported_by_line_and_left_out(cli: Any, tmp_path: Path) -> None:
    rows = write_rows(
        tmp_path / "rows.jsonl",
        [
            {"id": "ok", "problem_type": "exact", "answer": "1", "response": "<answer>1</answer>"},
            "{not json",
            {"id": "p", "answer": "1", "response": "x"},
            {"id": "q", "problem_type": "counting", "answer": "1", "response": "x"},
            {"id": "r", "problem_type": "exact", "answer": "1", "responses": "x"},
            {"id": "s", "problem_type": "exact", "response": "x"},
            ["a list"],
        ],
    )
    out = tmp_path / "scored.jsonl"
    result = cli("reward", "--input", str(rows), "--output", str(out))
    assert result.exit_code == 1
    for line, message in [
        (2, "not valid JSON"),
        (3, "missing field problem_type"),
        (4, "problem_type 'counting' has no reward (registered: abstain, boom, event_ordering, exact)"),
        (5, "'responses' must be a non-empty list of strings"),
        (6, "missing field ground_truth or answer or solution"),
        (7, "expected a JSON object, got list"),
    ]:
        assert f"{rows}:{line}: {message}" in result.stderr
    assert [r["id"] for r in read_rows(out)] == ["ok"]
    assert "6 bad row(s) left out" in result.stderr


def test_failing_reward_is_scored_zero_with_its_error(cli: Any, tmp_path: Path) -> None:
    rows = write_rows(
        tmp_path / "rows.jsonl", [{"id": "z", "problem_type": "boom", "answer": 1, "response": "r"}]
    )
    out = tmp_path / "scored.jsonl"
    result = cli("reward", "--input", str(rows), "--output", str(out)).assert_success()
    row = read_rows(out)[0]
    assert row["scores"] == [0.0] and row["errors"] == ["error: ValueError: reward bug"]
    assert "reward failures (scored 0): error 1" in result.stderr


def test_config_file_sets_weights(cli: Any, tmp_path: Path) -> None:
    rows = write_rows(
        tmp_path / "rows.jsonl",
        [{"problem_type": "exact", "answer": "1", "responses": ["1", "<answer>2</answer>"]}],
    )
    config = tmp_path / "config.yaml"
    config.write_text("rewards:\n  accuracy_weight: 0.5\n  format_weight: 0.5\n")
    out = tmp_path / "scored.jsonl"
    cli("reward", "--input", str(rows), "--output", str(out), "--config", str(config)).assert_success()
    assert read_rows(out)[0]["scores"] == [0.5, 0.5]
    config.write_text("accuracy_weight: 1.0\nformat_weight: 0.0\nfallback: false\n")  # the section alone
    cli("reward", "--input", str(rows), "--output", str(out), "--config", str(config)).assert_success()
    assert read_rows(out)[0]["scores"] == [0.0, 0.0]


def test_a_reward_scores_with_its_own_defaults_unless_the_config_sets_them(cli: Any, tmp_path: Path) -> None:
    rows = write_rows(
        tmp_path / "rows.jsonl",
        [
            {"problem_type": "event_ordering", "answer": "abcdef", "response": "<answer>abcdeX</answer>"},
            {"problem_type": "Event-Ordering", "answer": "abcdef", "response": "abcdef"},  # untagged
            {"problem_type": "ordering", "answer": "abcdef", "response": "<answer>abcdef</answer>"},
            {"problem_type": "exact", "answer": "1", "response": "<answer>1</answer>"},
        ],
    )
    out = tmp_path / "scored.jsonl"
    result = cli("reward", "--input", str(rows), "--output", str(out))
    result.assert_success()
    assert [r["scores"][0] for r in read_rows(out)] == [5 / 6, 0.0, 1.0, 1.0]  # 1·accuracy, no fallback
    summary = result.stderr.splitlines()[1:]
    assert summary == [  # one line per canonical reward name, with the weights each reward used
        "  event_ordering: 3 scored, mean 0.6111 (1·accuracy + 0·format, fallback off)",
        "  exact: 1 scored, mean 1.0000 (0.9·accuracy + 0.1·format, fallback on)",
    ]
    config = tmp_path / "config.yaml"
    config.write_text("rewards:\n  accuracy_weight: 0.9\n  fallback: true\n")  # format_weight: 1 - 0.9
    result = cli("reward", "--input", str(rows), "--output", str(out), "--config", str(config))
    result.assert_success()
    assert [r["scores"][0] for r in read_rows(out)][:3] == pytest.approx([0.9 * 5 / 6 + 0.1, 0.9, 1.0])
    assert "  event_ordering: 3 scored, mean 0.9167 (0.9·accuracy + 0.1·format, fallback on)" in result.stderr


def test_a_route_of_several_rewards_shows_each_with_its_weight(cli: Any, tmp_path: Path) -> None:
    rows = write_rows(
        tmp_path / "rows.jsonl", [{"problem_type": "Mixed", "answer": "ab", "response": "<answer>a</answer>"}]
    )
    config = tmp_path / "config.yaml"
    config.write_text("routes:\n  mixed: {event_ordering: 0.5, exact: 0.5}\n")
    out = tmp_path / "scored.jsonl"
    result = cli("reward", "--input", str(rows), "--output", str(out), "--config", str(config))
    result.assert_success()
    assert read_rows(out)[0]["scores"] == [pytest.approx(0.5 * 0.5 + 0.5 * 0.1)]
    assert (
        "  mixed: 1 scored, mean 0.3000 (0.5·event_ordering [1·accuracy + 0·format, fallback off] + "
        "0.5·exact [0.9·accuracy + 0.1·format, fallback on])"
    ) in result.stderr


def test_invalid_config_writes_nothing(cli: Any, tmp_path: Path) -> None:
    rows = write_rows(tmp_path / "rows.jsonl", [{"problem_type": "exact", "answer": "1", "response": "1"}])
    out = tmp_path / "scored.jsonl"
    out.write_text("previous\n")
    config = tmp_path / "config.yaml"
    config.write_text("rewards:\n  accuracy_weight: 0.7\n  format_weight: 0.7\n")
    result = cli("reward", "--input", str(rows), "--output", str(out), "--config", str(config))
    assert result.exit_code != 0
    assert "accuracy_weight + format_weight must be 1" in result.output + result.stderr
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "rows.jsonl", "scored.jsonl"]


def test_no_rewards_installed(fake_entry_points: Any, run_cli: Any, tmp_path: Path) -> None:
    fake_entry_points({})
    rows = write_rows(tmp_path / "rows.jsonl", [{"problem_type": "exact", "answer": "1", "response": "1"}])
    result = run_cli("reward", "--input", str(rows), "--output", str(tmp_path / "o.jsonl"))
    assert result.exit_code != 0 and "no rewards are installed" in result.output + result.stderr


def test_output_that_is_the_input_is_refused_also_through_links(cli: Any, tmp_path: Path) -> None:
    rows = write_rows(
        tmp_path / "rows.jsonl",
        [{"id": "ok", "problem_type": "exact", "answer": "1", "response": "1"}, "{bad row"],
    )
    before = rows.read_bytes()
    (tmp_path / "soft.jsonl").symlink_to(rows)
    os.link(rows, tmp_path / "hard.jsonl")
    for out in (rows, tmp_path / "soft.jsonl", tmp_path / "hard.jsonl", tmp_path / "." / "rows.jsonl"):
        result = cli("reward", "--input", str(rows), "--output", str(out))
        assert result.exit_code != 0
        assert "is the input file" in result.stderr and "choose another --output" in result.stderr
    assert rows.read_bytes() == before


def test_a_row_nested_100000_deep_is_a_bad_row_and_the_others_are_scored(cli: Any, tmp_path: Path) -> None:
    deep = '{"problem_type": "exact", "answer": ' + "[" * 100_000 + "]" * 100_000 + ', "response": "x"}'
    rows = write_rows(
        tmp_path / "rows.jsonl",
        [{"id": "a", "problem_type": "exact", "answer": "1", "response": "<answer>1</answer>"}, deep,
         {"id": "b", "problem_type": "exact", "answer": "2", "response": "<answer>2</answer>"}],
    )  # fmt: skip
    out = tmp_path / "scored.jsonl"
    result = cli("reward", "--input", str(rows), "--output", str(out))
    assert result.exit_code == 1 and result.exception is None
    assert f"{rows}:2: nested too deeply to read" in result.stderr
    assert [r["id"] for r in read_rows(out)] == ["a", "b"]


def test_a_binary_input_file_and_a_bom_are_reported_by_line(cli: Any, tmp_path: Path) -> None:
    good = json.dumps({"id": "a", "problem_type": "exact", "answer": "1", "response": "<answer>1</answer>"})
    rows = tmp_path / "rows.jsonl"
    rows.write_bytes(b"\xef\xbb\xbf" + good.encode() + b"\n\x89PNG\r\n\x1a\n\x00\x00\xff\xd8\n")
    out = tmp_path / "scored.jsonl"
    result = cli("reward", "--input", str(rows), "--output", str(out))
    assert result.exit_code == 1 and result.exception is None
    assert f"{rows}:2: not UTF-8 text (byte 0x89 at column 1" in result.stderr
    assert f"{rows}:3: not valid JSON" in result.stderr  # "\x1a" alone is valid UTF-8
    assert f"{rows}:4: not UTF-8 text (byte 0xff at column 3; a binary file?)" in result.stderr
    assert [r["id"] for r in read_rows(out)] == ["a"]  # the BOM of line 1 is no JSON error


class BrokenPlugin:
    @staticmethod
    @hookimpl
    def register_rewards(register: Any) -> None:
        register("lazy broken", "no_such_module_xyz:Reward")
        register("twice", Abstain)


class OtherPlugin:
    @staticmethod
    @hookimpl
    def register_rewards(register: Any) -> None:
        register("twice", Abstain)


def test_plugin_errors_name_the_plugin_and_the_rows_and_the_others_are_scored(
    fake_entry_points: Any, run_cli: Any, tmp_path: Path
) -> None:
    fake_entry_points(
        {"videorl-testrewards": RewardPlugin, "videorl-broken": BrokenPlugin, "videorl-other": OtherPlugin}
    )
    rows = write_rows(
        tmp_path / "rows.jsonl",
        [{"id": "a", "problem_type": "exact", "answer": "1", "response": "<answer>1</answer>"},
         {"id": "b", "problem_type": "lazy broken", "answer": "1", "response": "x"},
         {"id": "c", "problem_type": "twice", "answer": "1", "response": "x"}],
    )  # fmt: skip
    out = tmp_path / "scored.jsonl"
    result = run_cli("reward", "--input", str(rows), "--output", str(out))
    assert result.exit_code == 1 and result.exception is None, result.stderr
    assert "from distribution 'videorl-broken' could not be imported" in result.stderr
    assert "'twice' is registered twice" in result.stderr
    assert f"{rows}:2: its reward 'lazy broken' cannot be used" in result.stderr
    assert f"{rows}:3: its reward 'twice' cannot be used" in result.stderr
    assert [r["id"] for r in read_rows(out)] == ["a"] and read_rows(out)[0]["scores"] == [1.0]


def test_a_full_disk_says_so_and_keeps_the_previous_output(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from videorl.commands import reward

    rows = write_rows(
        tmp_path / "rows.jsonl", [{"id": "a", "problem_type": "exact", "answer": "1", "response": "1"}]
    )
    out = tmp_path / "scored.jsonl"
    out.write_text("previous\n")

    def full(f: Any, *args: Any) -> None:
        f.write("half a row")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(reward, "_write_rows", full)
    result = cli("reward", "--input", str(rows), "--output", str(out))
    assert result.exit_code != 0 and result.exception is None
    assert f"disk full at {tmp_path}" in result.stderr and "scored.jsonl was not written" in result.stderr
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.jsonl", "scored.jsonl"]


def test_duplicate_keys_in_the_config_file_are_errors(cli: Any, tmp_path: Path) -> None:
    rows = write_rows(tmp_path / "rows.jsonl", [{"problem_type": "exact", "answer": "1", "response": "1"}])
    config = tmp_path / "config.yaml"
    config.write_text("rewards:\n  accuracy_weight: 0.9\n  format_weight: 0.1\n  accuracy_weight: 0.5\n")
    result = cli(
        "reward", "--input", str(rows), "--output", str(tmp_path / "o.jsonl"), "--config", str(config)
    )
    assert result.exit_code != 0 and result.exception is None
    assert f"{config}:4: duplicate key 'rewards.accuracy_weight' (first set on line 2)" in result.stderr
    assert not (tmp_path / "o.jsonl").exists()


def test_an_unreadable_input_is_a_message(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    rows = write_rows(tmp_path / "rows.jsonl", [{"problem_type": "exact", "answer": "1", "response": "1"}])
    real_open = Path.open

    def failing_open(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == rows:
            raise OSError(errno.EIO, "Input/output error")
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", failing_open)
    result = cli("reward", "--input", str(rows), "--output", str(tmp_path / "o.jsonl"))
    assert result.exit_code != 0 and result.exception is None
    assert f"cannot read --input {rows}: Input/output error" in result.stderr


def test_output_to_a_device_writes_through_and_keeps_the_device(cli: Any, tmp_path: Path) -> None:
    """As root, replacing /dev/null with a regular file would break every program that writes to it."""
    import stat

    rows = write_rows(
        tmp_path / "rows.jsonl", [{"id": "ok", "problem_type": "exact", "answer": "1", "response": "1"}]
    )
    before = os.stat("/dev/null")
    cli("reward", "--input", str(rows), "--output", "/dev/null").assert_success()
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino and after.st_rdev == before.st_rdev
    target = write_rows(tmp_path / "old.jsonl", ["{}"])
    (tmp_path / "link.jsonl").symlink_to(target)  # a link: the file it leads to is written, the link stays
    cli("reward", "--input", str(rows), "--output", str(tmp_path / "link.jsonl")).assert_success()
    assert (tmp_path / "link.jsonl").is_symlink() and read_rows(target)[0]["id"] == "ok"


def test_help_says_which_weights_score(cli: Any) -> None:
    text = " ".join(cli("reward", "--help").assert_success().output.split())
    assert (
        "Each reward scores with its own defaults (a TaskReward's: 0.9·accuracy + 0.1·format, fallback on"
        in text
    )
    assert "the weights and fallback each reward used" in text
