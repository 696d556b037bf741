"""The component registry: lazy targets, loud collisions, "did you mean", aliases."""

from __future__ import annotations

import contextlib
import sys

import pytest

from videorl.errors import ComponentImportError, DuplicateComponentError, UnknownComponentError
from videorl.registry import Register, Registry, normalize_name


def factory() -> str:
    return "made"


def test_register_and_get_an_object_target() -> None:
    reg: Registry[object] = Registry("reward")
    reg.register("exact_match", factory, origin="dist-a", description="exact")
    assert reg.get("exact_match") is factory
    assert reg.create("exact_match") == "made"
    assert reg.names() == ["exact_match"] and "exact_match" in reg and len(reg) == 1
    assert reg.entry("exact_match").origin == "dist-a"


def test_names_and_aliases_are_normalised() -> None:
    reg: Registry[object] = Registry("reward")
    reg.register("multiple_choice", factory, origin="d", aliases=["multiple choice", "MCQ"])
    assert normalize_name("  Multiple - Choice ") == "multiple_choice"
    for spelling in ["multiple_choice", "Multiple Choice", "multiple-choice", "mcq"]:
        assert reg.canonical(spelling) == "multiple_choice"
        assert reg.get(spelling) is factory


def test_lazy_target_is_imported_on_first_use_only() -> None:
    reg: Registry[object] = Registry("reward")
    module = "tests_fake_lazy_module_xyz"
    sys.modules.pop(module, None)
    reg.register("lazy", "json:dumps", origin="d")
    reg.register("broken", f"{module}:thing", origin="videorl-broken")
    assert reg.entry("lazy").is_lazy
    import json

    assert reg.get("lazy") is json.dumps
    with pytest.raises(ComponentImportError) as err:
        reg.get("broken")
    message = str(err.value)
    assert "videorl-broken" in message and "ModuleNotFoundError" in message and module in message


def test_duplicate_name_names_both_distributions_and_stays_an_error_on_use() -> None:
    reg: Registry[object] = Registry("benchmark")
    reg.register("mvbench", factory, origin="videorl-benchmarks")
    with pytest.raises(DuplicateComponentError) as err:
        reg.register("MVBench", factory, origin="acme-benchmarks")
    assert "videorl-benchmarks" in str(err.value) and "acme-benchmarks" in str(err.value)
    with pytest.raises(DuplicateComponentError, match="'mvbench' is registered twice") as on_use:
        reg.get("mvbench")
    assert str(on_use.value) == str(err.value)


def test_an_alias_colliding_with_a_name_is_a_duplicate() -> None:
    reg: Registry[object] = Registry("reward")
    reg.register("ocr", factory, origin="a")
    with pytest.raises(DuplicateComponentError, match="'a'.*'b'"):
        reg.register("text_reading", factory, origin="b", aliases=["OCR"])


@pytest.mark.parametrize("order", [("builtin", "plugin"), ("plugin", "builtin")])
def test_a_collision_fails_both_components_and_nothing_else_whatever_the_order(
    order: tuple[str, ...],
) -> None:
    def builtin(register: Register) -> None:
        register("multiple_choice", factory, aliases=["mc"])
        register("numerical", factory, aliases=["number"])

    def plugin(register: Register) -> None:
        register("my_choice", factory, aliases=["MC"])  # collides through an alias only
        register("counting", factory)

    reg: Registry[object] = Registry("reward")
    hooks = {"builtin": (builtin, "videorl-rewards"), "plugin": (plugin, "acme-rewards")}
    for name in order:
        hook, origin = hooks[name]
        hook(reg.registrar(origin))  # the hook's callback does not raise: the plugin registers the rest
    assert reg.names() == ["counting", "multiple_choice", "my_choice", "numerical"]
    assert reg.get("numerical") is factory and reg.get("number") is factory and reg.get("counting") is factory
    for name in ("multiple_choice", "mc", "my_choice", "Multiple Choice"):
        with pytest.raises(DuplicateComponentError) as err:
            reg.get(name)
        assert "reward 'mc' is registered twice" in str(err.value)
        assert "videorl-rewards" in str(err.value) and "acme-rewards" in str(err.value)
    ((message, origins),) = reg.collisions()
    assert sorted(origins) == ["acme-rewards", "videorl-rewards"]
    assert "'multiple_choice'" in message and "'my_choice'" in message
    assert "VIDEORL_DISABLE_PLUGINS=acme-rewards" in message


def test_removing_one_side_of_a_collision_makes_the_other_usable() -> None:
    reg: Registry[object] = Registry("reward")
    reg.register("counting", factory, origin="a")
    with pytest.raises(DuplicateComponentError):
        reg.register("counting", factory, origin="b")
    reg.remove_origin("b")
    assert reg.get("counting") is factory and reg.collisions() == []


def test_unknown_name_suggests_close_names_and_lists_registered() -> None:
    reg: Registry[object] = Registry("reward")
    reg.register("temporal_grounding", factory, origin="d")
    reg.register("spatial_grounding", factory, origin="d")
    with pytest.raises(UnknownComponentError) as err:
        reg.get("temporal_grounding_v")
    assert "Did you mean 'temporal_grounding'" in str(err.value)
    with pytest.raises(UnknownComponentError, match=r"Registered: spatial_grounding, temporal_grounding"):
        reg.get("zzz")


def test_unknown_name_mentions_plugins_that_failed_to_load() -> None:
    reg: Registry[object] = Registry("reward")
    reg.failed_plugins = {"videorl-extra": "ImportError: no module named foo"}
    with pytest.raises(UnknownComponentError, match="videorl-extra: ImportError: no module named foo"):
        reg.get("counting")


@pytest.mark.parametrize(
    ("name", "target", "aliases", "match"),
    [
        ("", factory, (), "non-empty string"),
        (3, factory, (), "non-empty string"),
        ("x", 42, (), "must be a class, a factory"),
        ("x", "not a path", (), "module:attribute"),
        ("x", factory, "abc", "sequence of strings"),
    ],
)
def test_invalid_registrations_are_rejected(
    name: object, target: object, aliases: object, match: str
) -> None:
    reg: Registry[object] = Registry("reward")
    with pytest.raises(TypeError, match=match):
        reg.register(name, target, origin="d", aliases=aliases)  # type: ignore[arg-type]


def test_remove_origin_forgets_names_and_aliases() -> None:
    reg: Registry[object] = Registry("reward")
    reg.register("a", factory, origin="one", aliases=["aa"])
    reg.register("b", factory, origin="two")
    reg.remove_origin("one")
    assert reg.names() == ["b"] and "aa" not in reg


def test_three_claimants_are_named_in_one_error() -> None:
    reg: Registry[object] = Registry("benchmark")
    for origin in ("c-bench", "a-bench", "b-bench"):
        with contextlib.suppress(DuplicateComponentError):
            reg.register("toy", factory, origin=origin)
    with pytest.raises(DuplicateComponentError) as err:
        reg.get("toy")
    assert str(err.value).startswith(
        "benchmark 'toy' is registered 3 times: by distribution 'a-bench' (as 'toy') and by distribution "
        "'b-bench' (as 'toy') and by distribution 'c-bench' (as 'toy'). None is used"
    )
