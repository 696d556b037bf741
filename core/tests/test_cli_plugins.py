"""``videorl plugins`` and the global plugin flags of the command line."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from videorl import hookimpl
from videorl.cli import _global_flags


class CommandPlugin:
    @hookimpl
    def register_commands(self, cli: Any) -> None:
        import click

        @cli.command("hello")
        def hello() -> None:
            click.echo("hello from a plugin")


class BrokenCommandPlugin:
    @hookimpl
    def register_commands(self, cli: Any) -> None:
        raise RuntimeError("cannot add my command")


def test_global_flags_are_found_anywhere() -> None:
    assert _global_flags(["--disable-plugin", "a,b", "plugins", "--disable-plugin=c", "--plugin", "m"]) == (
        ["a", "b", "c"],
        ["m"],
        False,
    )
    assert _global_flags(["--strict-plugins", "plugins", "--", "--plugin", "x"]) == ([], [], True)


def test_plugins_json_lists_first_party_distributions(run_cli: Any) -> None:
    data = run_cli("plugins", "--json").assert_success().json()
    by_name = {p["name"]: p for p in data}
    assert {"videorl-rewards", "videorl-benchmarks", "videorl-models"} <= set(by_name)
    entry = by_name["videorl-rewards"]
    assert set(entry) >= {"name", "version", "hooks", "components", "status", "error"}
    assert entry["status"] == "ok" and entry["error"] is None and "register_rewards" in entry["hooks"]
    assert "videorl" not in by_name  # built-ins only with --all
    assert "videorl" in {p["name"] for p in run_cli("plugins", "--json", "--all").json()}


def test_plugins_table_requirements_and_hook_filter(run_cli: Any) -> None:
    table = run_cli("plugins").assert_success().output.splitlines()
    assert table[0].split() == ["plugin", "version", "status", "components", "/", "error"]
    assert any(line.startswith("videorl-models") and " ok" in line for line in table)
    reqs = run_cli("plugins", "--requirements").assert_success().output.split()
    assert "videorl==0.1.0" in reqs and "videorl-benchmarks==0.1.0" in reqs
    only = run_cli("plugins", "--json", "--hook", "register_benchmarks").json()
    assert [p["name"] for p in only] == ["videorl-benchmarks"]


def test_disable_flag_and_env(run_cli: Any) -> None:
    data = run_cli("--disable-plugin", "videorl-models", "plugins", "--json").json()
    assert {p["name"]: p["status"] for p in data}["videorl-models"] == "disabled"
    data = run_cli("plugins", "--json", env={"VIDEORL_DISABLE_PLUGINS": "videorl-rewards"}).json()
    assert {p["name"]: p["status"] for p in data}["videorl-rewards"] == "disabled"


def test_broken_plugin_is_shown_and_the_cli_still_runs(run_cli: Any, fake_entry_points: Any) -> None:
    fake_entry_points(
        {"videorl-broken": ImportError("No module named 'cv3'"), "videorl-hello": CommandPlugin()}
    )
    result = run_cli("plugins").assert_success()
    assert "videorl-broken" in result.output and "failed" in result.output and "cv3" in result.output
    assert run_cli("hello").assert_success().output == "hello from a plugin\n"


def test_plugin_failing_to_add_commands_is_reported(run_cli: Any, fake_entry_points: Any) -> None:
    fake_entry_points({"videorl-badcmd": BrokenCommandPlugin()})
    data = run_cli("plugins", "--json").assert_success().json()
    bad = {p["name"]: p for p in data}["videorl-badcmd"]
    assert bad["status"] == "failed" and "cannot add my command" in bad["error"]


def test_strict_mode_fails_on_a_broken_plugin(run_cli: Any, fake_entry_points: Any) -> None:
    fake_entry_points({"videorl-broken": ImportError("nope")})
    proc = subprocess.run(
        [sys.executable, "-m", "videorl.cli", "--strict-plugins", "plugins"], capture_output=True, text=True
    )
    assert proc.returncode == 0  # the real environment has no broken plugin
    result = run_cli("--strict-plugins", "plugins")
    assert (
        result.exit_code == 2 and "plugin 'videorl-broken' failed to load: ImportError: nope" in result.stderr
    )


def test_version_lists_plugins() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "videorl.cli", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("videorl 0.1.0") and "videorl-rewards 0.1.0 [ok]" in out


def test_a_broken_core_command_is_an_error_not_a_silently_missing_command(
    run_cli: Any, monkeypatch: Any
) -> None:
    from videorl import builtin

    def broken(cli: Any) -> None:
        raise ModuleNotFoundError("No module named 'videorl.commands.gone'")

    monkeypatch.setattr(builtin, "register_commands", builtin.hookimpl(broken))
    result = run_cli("plugins")
    assert result.exit_code == 2
    assert (
        "plugin 'videorl' failed to load: ModuleNotFoundError: No module named 'videorl.commands.gone'"
        in result.stderr
    )


class TakesMultipleChoice:
    @hookimpl
    def register_rewards(self, register: Any) -> None:
        register("multiple_choice", lambda: None)
        register("parity", lambda: None)


def test_a_name_collision_is_listed_and_fatal_only_with_strict_plugins(
    run_cli: Any, fake_entry_points: Any
) -> None:
    from videorl.testing import FakeEntryPoint

    fake_entry_points(
        [
            FakeEntryPoint("videorl-rewards", "videorl_rewards.plugin"),
            FakeEntryPoint("acme", TakesMultipleChoice()),
        ]
    )
    table = run_cli("plugins").assert_success().output.splitlines()
    conflicts = [line for line in table if " conflict " in line]
    assert len(conflicts) == 2 and conflicts[0] == conflicts[1]  # under each of the two distributions
    conflict = conflicts[0]
    assert "reward 'multiple_choice' is registered twice" in conflict
    assert "'videorl-rewards'" in conflict and "'acme'" in conflict
    assert any(line.startswith("acme ") and " ok " in line and "parity" in line for line in table)
    data = {p["name"]: p for p in run_cli("plugins", "--json").json()}
    assert (
        data["acme"]["conflicts"]
        == data["videorl-rewards"]["conflicts"]
        == [conflict.split("conflict", 1)[1].strip()]
    )
    result = run_cli("--strict-plugins", "plugins")
    assert result.exit_code == 2 and "reward 'multiple_choice' is registered twice" in result.stderr


class SkeletonBackend:
    """An InternVL-like skeleton: the geometry and two methods, nine members short."""

    family = "internvl"
    model_types = ("internvl_chat",)
    factor = 28
    temporal_patch_size = 1
    budget = None

    def __init__(self, path: Any = None) -> None:
        self.path = path

    def load_model(self, *, dtype: Any = None, device: Any = None) -> Any: ...

    def encode(self, prompt: Any) -> Any: ...

    @property
    def processor(self) -> Any:
        raise AssertionError("the conformance check must not evaluate properties")


class SkeletonBackendPlugin:
    @hookimpl
    def register_model_backends(self, register: Any) -> None:
        register("internvl", SkeletonBackend)


def test_a_backend_lacking_protocol_members_is_failed_with_their_names(
    run_cli: Any, fake_entry_points: Any
) -> None:
    from videorl.testing import FakeEntryPoint

    fake_entry_points(
        [
            FakeEntryPoint("videorl-internvl", SkeletonBackendPlugin()),
            FakeEntryPoint("videorl-models", "videorl_models.plugin"),
        ]
    )
    data = {p["name"]: p for p in run_cli("plugins", "--json").assert_success().json()}
    entry = data["videorl-internvl"]
    assert entry["status"] == "failed"
    assert entry["error"].endswith(
        "lacks ModelBackend members: check_inputs, collate, end_of_turn_id, forbidden_token_ids, "
        "install_vision_sync, "
        "prepare_model, prompt_length, rollout_request, tokenizer (see docs/plugin-authors/model-backends.md)"
    )
    assert data["videorl-models"]["status"] == "ok"  # the first-party backends conform
    table = run_cli("plugins").output
    assert "videorl-internvl" in table and "failed" in table and "rollout_request" in table


class OldSignatureBackend(SkeletonBackend):
    """A backend whose build_tiny predates the width option."""

    @classmethod
    def build_tiny(cls, out_dir: Any, *, model_type: Any = None, seed: int = 0) -> Any:
        out_dir.mkdir(parents=True)
        (out_dir / "config.json").write_text(f'{{"model_type": "internvl_chat", "seed": {seed}}}')
        return out_dir


class OldSignaturePlugin:
    @hookimpl
    def register_model_backends(self, register: Any) -> None:
        register("internvl", OldSignatureBackend, aliases=["internvl_chat"])


def test_models_tiny_calls_a_build_tiny_without_width(
    run_cli: Any, fake_entry_points: Any, tmp_path: Any
) -> None:
    fake_entry_points({"videorl-internvl": OldSignaturePlugin()})
    out = tmp_path / "tiny"
    result = run_cli("models", "tiny", "internvl", str(out), "--seed", "3").assert_success()
    assert result.output == f"wrote a tiny internvl checkpoint to {out}\n"
    assert (out / "config.json").read_text() == '{"model_type": "internvl_chat", "seed": 3}'
    wide = run_cli("models", "tiny", "internvl", str(tmp_path / "wide"), "--width", "128")
    assert wide.exit_code == 2 and "builds its tiny model at one width only" in wide.output + wide.stderr
