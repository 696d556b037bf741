"""Plugin discovery and loading: built-ins, entry points, failures, blocking, validation."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

from videorl import hookimpl
from videorl.errors import (
    ComponentImportError,
    DuplicateComponentError,
    PluginLoadError,
    UnknownComponentError,
)
from videorl.registry import Register
from videorl.testing import FakeEntryPoint


class CountingPlugin:
    @hookimpl
    def register_rewards(self, register: Register) -> None:
        register("counting", lambda: "counting-reward", aliases=["object counting"])


class OtherCountingPlugin:
    @hookimpl
    def register_rewards(self, register: Register) -> None:
        register("Counting", lambda: "other")


class BenchPlugin:
    @hookimpl
    def register_benchmarks(self, register: Register) -> None:
        register("toybench", "json:loads")


class WrongArgumentPlugin:
    @hookimpl
    def register_rewards(self, registrar: Register) -> None:  # not the spec's argument name
        registrar("x", lambda: None)


class TypoHookPlugin:
    @hookimpl
    def register_reward(self, register: Register) -> None:  # missing "s"
        register("x", lambda: None)


class HalfBrokenPlugin:
    @hookimpl
    def register_rewards(self, register: Register) -> None:
        register("first", lambda: None)
        raise RuntimeError("boom while registering")


def test_builtins_load_without_entry_points(videorl_plugins: Any) -> None:
    plugins = videorl_plugins()
    core = plugins.infos["videorl"]
    assert core.builtin and core.status == "ok" and "register_commands" in core.hooks


def test_the_three_first_party_distributions_are_discovered(videorl_plugins: Any) -> None:
    plugins = videorl_plugins(entry_points=True)
    for dist, hook in [
        ("videorl-rewards", "register_rewards"),
        ("videorl-benchmarks", "register_benchmarks"),
        ("videorl-models", "register_model_backends"),
    ]:
        info = plugins.infos[dist]
        assert info.status == "ok", info.error
        assert info.version == "0.1.0" and hook in info.hooks and not info.builtin
    assert "videorl-rewards==0.1.0" in plugins.requirements()


def test_components_record_their_origin(videorl_plugins: Any, fake_entry_points: Any) -> None:
    fake_entry_points({"videorl-counting": CountingPlugin(), "videorl-toybench": BenchPlugin()})
    plugins = videorl_plugins(entry_points=True)
    assert plugins.rewards.entry("object counting").origin == "videorl-counting"
    assert plugins.rewards.create("counting") == "counting-reward"
    assert plugins.infos["videorl-counting"].components == {"rewards": ["counting"]}
    assert plugins.infos["videorl-toybench"].components == {"benchmarks": ["toybench"]}
    import json

    assert plugins.benchmarks.get("toybench") is json.loads


def test_duplicate_component_names_both_distributions(videorl_plugins: Any, fake_entry_points: Any) -> None:
    fake_entry_points({"videorl-counting": CountingPlugin(), "acme-counting": OtherCountingPlugin()})
    plugins = videorl_plugins(entry_points=True)
    for dist in ("videorl-counting", "acme-counting"):
        info = plugins.infos[dist]
        assert info.status == "ok" and len(info.conflicts) == 1
        assert "videorl-counting" in info.conflicts[0] and "acme-counting" in info.conflicts[0]
    with pytest.raises(DuplicateComponentError, match="acme-counting.*videorl-counting"):
        plugins.rewards.get("counting")


class AcmeChoicePlugin:
    """A third-party plugin whose reward takes a built-in name, and whose other reward takes an alias."""

    @hookimpl
    def register_rewards(self, register: Register) -> None:
        register("multiple_choice", lambda: "acme")
        register("acme_choice", lambda: "acme", aliases=["mc"])
        register("acme_parity", lambda: "parity")


@pytest.mark.parametrize("acme_first", [True, False])
def test_a_plugin_taking_a_builtin_name_fails_only_what_collides(
    videorl_plugins: Any, fake_entry_points: Any, acme_first: bool
) -> None:
    eps = [
        FakeEntryPoint("videorl-rewards", "videorl_rewards.plugin"),
        FakeEntryPoint("acme", AcmeChoicePlugin()),
    ]
    fake_entry_points(eps[::-1] if acme_first else eps)
    plugins = videorl_plugins(entry_points=True)
    rewards = plugins.rewards
    builtin = [n for n in rewards.by_origin("videorl-rewards") if n != "multiple_choice"]
    assert len(builtin) == 14
    for name in builtin:  # the other 14, with their aliases
        assert rewards.entry(name).origin == "videorl-rewards" and callable(rewards.get(name))
    assert rewards.entry("number").name == "numerical"
    assert rewards.create("acme_parity") == "parity"
    for name in ("multiple_choice", "multiple choice", "mc", "acme_choice"):
        with pytest.raises(DuplicateComponentError) as err:
            rewards.get(name)
        assert "videorl-rewards" in str(err.value) and "'acme'" in str(err.value)
    assert plugins.infos["videorl-rewards"].status == plugins.infos["acme"].status == "ok"
    assert len(plugins.infos["acme"].conflicts) == 2  # the name and the alias


def test_duplicate_is_fatal_in_strict_mode(videorl_plugins: Any, fake_entry_points: Any) -> None:
    fake_entry_points({"videorl-counting": CountingPlugin(), "acme-counting": OtherCountingPlugin()})
    with pytest.raises(
        PluginLoadError, match="'counting' is registered twice.*acme-counting.*videorl-counting"
    ):
        videorl_plugins(entry_points=True, strict=True)


def test_a_plugin_that_raises_on_import_is_reported_not_fatal(
    videorl_plugins: Any, fake_entry_points: Any
) -> None:
    fake_entry_points(
        {"videorl-broken": ImportError("No module named 'cv3'"), "videorl-counting": CountingPlugin()}
    )
    plugins = videorl_plugins(entry_points=True)
    broken = plugins.infos["videorl-broken"]
    assert broken.status == "failed" and "No module named 'cv3'" in broken.error
    assert plugins.infos["videorl-counting"].status == "ok"
    with pytest.raises(UnknownComponentError, match=r"videorl-broken: ImportError: No module named 'cv3'"):
        plugins.rewards.get("its_reward")


def test_a_lazy_component_that_fails_to_import_names_its_distribution(
    videorl_plugins: Any, fake_entry_points: Any
) -> None:
    class LazyBroken:
        @hookimpl
        def register_rewards(self, register: Register) -> None:
            register("needs_cv3", "cv3_not_installed.rewards:Reward")

    fake_entry_points({"videorl-lazy": LazyBroken()})
    plugins = videorl_plugins(entry_points=True)
    assert plugins.infos["videorl-lazy"].status == "ok"  # nothing imported yet
    with pytest.raises(ComponentImportError, match="videorl-lazy.*ModuleNotFoundError"):
        plugins.rewards.get("needs_cv3")


def test_disabled_plugins_are_not_imported(
    videorl_plugins: Any, fake_entry_points: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_entry_points(
        [
            FakeEntryPoint("videorl-bomb", RuntimeError("must not be imported")),
            FakeEntryPoint("videorl-counting", CountingPlugin()),
            FakeEntryPoint("videorl-toybench", BenchPlugin()),
        ]
    )
    monkeypatch.setenv("VIDEORL_DISABLE_PLUGINS", "videorl-bomb, videorl-counting")
    plugins = videorl_plugins(entry_points=True, disable=["videorl-toybench"])
    assert {n: i.status for n, i in plugins.infos.items() if n != "videorl"} == {
        "videorl-bomb": "disabled",
        "videorl-counting": "disabled",
        "videorl-toybench": "disabled",
    }
    assert "counting" not in plugins.rewards


def test_hook_arguments_are_validated(videorl_plugins: Any, fake_entry_points: Any) -> None:
    fake_entry_points({"videorl-wrongarg": WrongArgumentPlugin(), "videorl-typo": TypoHookPlugin()})
    plugins = videorl_plugins(entry_points=True)
    wrong = plugins.infos["videorl-wrongarg"]
    assert wrong.status == "failed" and "registrar" in wrong.error
    typo = plugins.infos["videorl-typo"]
    assert typo.status == "failed"
    assert "'register_reward'" in typo.error and "did you mean 'register_rewards'" in typo.error


def test_a_plugin_raising_in_its_hook_leaves_no_partial_components(
    videorl_plugins: Any, fake_entry_points: Any
) -> None:
    fake_entry_points({"videorl-half": HalfBrokenPlugin()})
    plugins = videorl_plugins(entry_points=True)
    assert plugins.infos["videorl-half"].status == "failed"
    assert "boom while registering" in plugins.infos["videorl-half"].error
    assert "first" not in plugins.rewards


def test_duplicate_entry_point_names_are_reported(videorl_plugins: Any, fake_entry_points: Any) -> None:
    fake_entry_points(
        [FakeEntryPoint("videorl-x", CountingPlugin()), FakeEntryPoint("videorl-x", BenchPlugin())]
    )
    plugins = videorl_plugins(entry_points=True)
    assert plugins.infos["videorl-x"].status == "ok"
    dup = [i for n, i in plugins.infos.items() if n.startswith("videorl-x (")]
    assert len(dup) == 1 and dup[0].status == "failed" and "used by two plugins" in dup[0].error


def test_one_off_plugin_modules(videorl_plugins: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_local_plugin.py").write_text(
        textwrap.dedent(
            """
            import videorl

            @videorl.hookimpl
            def register_rewards(register):
                register("local", "json:dumps")
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins = videorl_plugins("my_local_plugin")
    assert plugins.rewards.entry("local").origin == "my_local_plugin"


def test_cli_path_imports_neither_torch_nor_vllm() -> None:
    code = (
        "import sys\n"
        "from videorl.cli import main\n"
        "for args in (['--help'], ['plugins', '--json']):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = sorted(m for m in ('torch', 'vllm', 'transformers', 'ray') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "HEAVY []"


class ExitingHookPlugin:
    @hookimpl
    def register_rewards(self, register: Register) -> None:
        register("gone", lambda: None)
        raise SystemExit("plugin says goodbye")


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("raise SystemExit(3)", "SystemExit: 3"),
        ("import sys; sys.exit('no GPU here')", "SystemExit: no GPU here"),
        ("raise KeyboardInterrupt('from the plugin')", "KeyboardInterrupt: from the plugin"),
    ],
)
def test_a_plugin_ending_the_process_on_import_is_one_failed_plugin(
    run_cli: Any,
    fake_entry_points: Any,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    body: str,
    error: str,
) -> None:
    (tmp_path / "exiting_plugin.py").write_text(body + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fake_entry_points({"videorl-exiting": "exiting_plugin", "videorl-counting": CountingPlugin()})
    data = run_cli("plugins", "--json").assert_success().json()
    by_name = {p["name"]: p for p in data}
    assert by_name["videorl-exiting"]["status"] == "failed" and by_name["videorl-exiting"]["error"] == error
    assert by_name["videorl-counting"]["status"] == "ok"


def test_a_plugin_hook_raising_system_exit_is_one_failed_plugin(
    videorl_plugins: Any, fake_entry_points: Any
) -> None:
    fake_entry_points({"videorl-exits": ExitingHookPlugin(), "videorl-counting": CountingPlugin()})
    plugins = videorl_plugins(entry_points=True)
    assert plugins.infos["videorl-exits"].status == "failed"
    assert plugins.infos["videorl-exits"].error == "SystemExit: plugin says goodbye"
    assert plugins.rewards.get("counting")() == "counting-reward" and "gone" not in plugins.rewards


def test_a_real_ctrl_c_while_a_plugin_imports_still_stops(
    videorl_plugins: Any, fake_entry_points: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal

    (tmp_path / "slow_plugin.py").write_text("import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fake_entry_points({"videorl-slow": "slow_plugin"})
    # Python's own handler, as in a terminal (a test runner's worker process may ignore SIGINT)
    original = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            videorl_plugins(entry_points=True)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the watch is removed again
    finally:
        signal.signal(signal.SIGINT, original)
