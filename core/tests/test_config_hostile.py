"""Hostile configs: an alias bomb (a few hundred bytes that expand to billions of values) is refused in
time linear in the file, anchors used as intended still work, and ``!!python`` tags stay refused."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from videorl.config import load_config, parse_yaml
from videorl.config.loader import MAX_ALIASED_VALUES
from videorl.errors import ConfigError


def _bomb(levels: int = 9) -> str:
    """The "billion laughs" in YAML: each level a mapping of nine aliases of the level before (the key
    walk of the old loader followed every path: 9 ** 9 of them)."""
    lines = ["a: &a {" + ", ".join(f"{k}: lol" for k in "123456789") + "}"]
    names = "abcdefghijklmnop"
    for prev, name in itertools.pairwise(names[:levels]):
        lines.append(f"{name}: &{name} {{" + ", ".join(f"{k}: *{prev}" for k in "123456789") + "}")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    text = _bomb()
    assert len(text) < 900  # 9 ** 9 = 387,420,489 values once expanded
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    start = time.monotonic()
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert time.monotonic() - start < 2.0  # refused at line 5, the first level past the limit
    assert str(exc.value) == (
        f"{path}:5: its aliases (*name) repeat more than {MAX_ALIASED_VALUES:,} values; write the repeated "
        "parts out, or nest fewer aliases"
    )
    with pytest.raises(ConfigError, match=r"override 'seed=.*the value is refused .*repeat more than"):
        load_config(None, ["seed=" + _bomb().replace("\n", ", ").join("{}")])


def test_anchors_within_the_limit_still_work_and_each_mapping_is_walked_once() -> None:
    text = "base: &b\n  x: 1\n  x: 2\none: *b\ntwo: *b\n"
    data, lines, duplicates = parse_yaml(text, "c.yaml")
    assert data == {"base": {"x": 2}, "one": {"x": 2}, "two": {"x": 2}}
    assert duplicates == ["c.yaml:3: duplicate key 'base.x' (first set on line 2)"]  # once, not per alias
    assert lines[("base", "x")] == 3 and lines[("one",)] == 4 and ("one", "x") not in lines
    merged = parse_yaml("d: &d {x: 1}\nm:\n  <<: *d\n  y: 2\n", "m.yaml").data["m"]
    assert merged == {"x": 1, "y": 2}
    # 4 levels (16,600 values once expanded, keys counted) are within the limit, 5 (149,500) are not
    assert parse_yaml(_bomb(4), "ok.yaml").data["d"][1][2][3][9] == "lol"
    with pytest.raises(ConfigError, match="repeat more than"):
        parse_yaml(_bomb(5), "five.yaml")


@pytest.mark.slow
def test_python_tags_and_deep_nesting_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"py.yaml:1: invalid YAML: .*python/object"):
        parse_yaml("x: !!python/object/apply:os.system ['true']\n", "py.yaml")
    with pytest.raises(ConfigError, match=r"deep.yaml: invalid YAML: nested too deeply"):
        parse_yaml("x: " + "[" * 5000 + "]" * 5000 + "\n", "deep.yaml")
