"""The docs keep up with the code: every hook documented with its signature, every guide linked."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from videorl import hookspecs

ROOT = Path(__file__).resolve().parents[1]


def test_every_hook_is_documented_with_its_signature() -> None:
    doc = (ROOT / "docs" / "plugin-authors" / "hooks.md").read_text()
    documented = set(re.findall(r"^### `(\w+)\((.*?)\)`", doc, flags=re.M))
    specs = {
        (name, ", ".join(inspect.signature(getattr(hookspecs, name)).parameters))
        for name in hookspecs.__all__
        if name.startswith("register_")
    }
    assert documented == specs


def test_plugin_author_guides_exist_and_are_linked() -> None:
    index = (ROOT / "docs" / "plugin-authors" / "README.md").read_text()
    for page in re.findall(r"\]\(([\w-]+\.md)\)", index):
        assert (ROOT / "docs" / "plugin-authors" / page).is_file(), page
    readme = (ROOT / "README.md").read_text()
    assert "docs/plugin-authors/README.md" in readme
