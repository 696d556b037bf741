"""Prompt templates: registration from a directory, variants, families, lookup, strict fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from videorl.api import hookimpl
from videorl.errors import DataError, UnknownComponentError
from videorl.prompts import PromptTemplate, find_template, register_template_dir, render_prompt, template_name
from videorl.registry import Registry


@pytest.fixture
def template_dir(tmp_path: Path) -> Path:
    files = {
        "_options.jinja": "{% for o in options %}\n{{ o }}\n{% endfor %}",
        "qa.jinja": "{{ problem }}{% if thinking %} Think first.{% endif %}",
        "mc.jinja": '{{ problem }}\n{% include "_options.jinja" %}\nLetter only.',
        "mc.thinking.jinja": "{{ problem }} Reason, then the letter.",
        "mc@fam.jinja": "[fam] {{ problem }}{% if thinking %} (thinking){% endif %}",
        "mc.thinking@fam2.jinja": "[fam2] {{ problem }}",
        "box.jinja": "{{ problem }} in {{ unit(family) }}",
        "notes.txt": "not a template",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def registry_of(directory: Path, **globals: Any) -> tuple[Registry[Any], list[str]]:
    registry: Registry[Any] = Registry("prompt template")
    names = register_template_dir(registry.registrar("test"), directory, globals=globals)
    return registry, names


def test_register_template_dir_names(template_dir: Path) -> None:
    registry, names = registry_of(template_dir)
    assert sorted(names) == [
        "box", "box/thinking", "mc", "mc/thinking", "mc/thinking@fam", "mc/thinking@fam2", "mc@fam", "qa",
        "qa/thinking",
    ]  # fmt: skip
    assert sorted(names) == registry.names()


def test_variants_and_partials(template_dir: Path) -> None:
    registry, _ = registry_of(template_dir)
    sample = {"problem": "Which?", "problem_type": "mc", "options": ["A. x", "B. y"]}
    assert render_prompt(registry, sample, thinking=False) == "Which?\nA. x\nB. y\nLetter only."
    assert render_prompt(registry, sample, thinking=True) == "Which? Reason, then the letter."
    qa = {"problem": "Why?", "problem_type": "qa"}
    assert render_prompt(registry, qa, thinking=False) == "Why?"
    assert render_prompt(registry, qa, thinking=True) == "Why? Think first."


def test_family_first_then_generic(template_dir: Path) -> None:
    registry, _ = registry_of(template_dir)
    sample = {"problem": "Q", "problem_type": "mc", "options": []}
    assert render_prompt(registry, sample, thinking=False, family="fam") == "[fam] Q"
    assert render_prompt(registry, sample, thinking=True, family="fam") == "[fam] Q (thinking)"
    assert render_prompt(registry, sample, thinking=True, family="fam2") == "[fam2] Q"
    assert render_prompt(registry, sample, thinking=False, family="fam2") == "Q\nLetter only."
    assert render_prompt(registry, sample, thinking=False, family="other") == "Q\nLetter only."


def test_canonical_name_and_globals(template_dir: Path) -> None:
    registry, _ = registry_of(template_dir, unit=lambda family: "pixels" if family == "f" else "fractions")
    canonical = {"question answering": "qa", "grounding": "box"}.__getitem__
    assert (
        render_prompt(
            registry,
            {"problem": "Q", "problem_type": "question answering"},
            thinking=True,
            canonical=canonical,
        )
        == "Q Think first."
    )
    assert (
        render_prompt(
            registry,
            {"problem": "Where", "problem_type": "grounding"},
            thinking=False,
            family="f",
            canonical=canonical,
        )
        == "Where in pixels"
    )


def test_aliases_find_every_variant(template_dir: Path) -> None:
    registry: Registry[Any] = Registry("prompt template")
    register_template_dir(registry.registrar("test"), template_dir, aliases={"mc": ["multiple choice"]})
    sample = {"problem": "Q", "problem_type": "Multiple-Choice", "options": ["A. x"]}
    assert render_prompt(registry, sample, thinking=True) == "Q Reason, then the letter."
    assert render_prompt(registry, sample, thinking=True, family="fam") == "[fam] Q (thinking)"
    assert render_prompt(registry, sample, thinking=False) == "Q\nA. x\nLetter only."


def test_unknown_template_lists_what_was_tried(template_dir: Path) -> None:
    registry, _ = registry_of(template_dir)
    with pytest.raises(UnknownComponentError) as err:
        find_template(registry, "tracking", thinking=True, family="fam", canonical={}.__getitem__)
    assert "no thinking prompt template for problem_type 'tracking'" in str(err.value)
    assert "tried tracking/thinking@fam, tracking/thinking" in str(err.value)
    assert "Registered templates: box, box/thinking" in str(err.value)


def test_missing_field_names_template_and_field(template_dir: Path) -> None:
    registry, _ = registry_of(template_dir)
    with pytest.raises(DataError) as err:
        render_prompt(registry, {"id": "s42", "problem": "Q", "problem_type": "mc"}, thinking=False)
    message = str(err.value)
    assert "prompt template 'mc'" in message and "mc.jinja" in message
    assert "references field 'options', which the fields of sample 's42' do not have" in message
    inline = PromptTemplate("inline", "{{ sample.colour }}")
    with pytest.raises(DataError, match="references field 'colour'"):
        inline.render({"sample": {}})
    with pytest.raises(DataError, match="has no problem_type"):
        render_prompt(registry, {"problem": "Q"}, thinking=False)


def test_bad_templates(tmp_path: Path) -> None:
    (tmp_path / "x.fancy.jinja").write_text("{{ problem }}")
    with pytest.raises(ValueError, match="only variant a template file may name is '.thinking'"):
        registry_of(tmp_path)
    broken = PromptTemplate("broken", "{% if %}")
    with pytest.raises(DataError, match="prompt template 'broken' does not compile"):
        broken.render({})
    with pytest.raises(TypeError, match="exactly one of source and path"):
        PromptTemplate("neither")


def test_template_name() -> None:
    assert template_name("mc") == "mc"
    assert template_name("mc", thinking=True, family="qwen3_vl") == "mc/thinking@qwen3_vl"


class TemplatePlugin:
    @staticmethod
    @hookimpl
    def register_prompt_templates(register: Any) -> None:
        register("counting", PromptTemplate("counting", "How many {{ thing }}?"))


def test_templates_registered_through_the_hook(videorl_plugins: Any) -> None:
    plugins = videorl_plugins(TemplatePlugin)
    sample = {"problem_type": "Counting", "thing": "cats"}
    assert render_prompt(plugins.prompt_templates, sample, thinking=False) == "How many cats?"


def test_a_routed_type_falls_back_to_each_of_its_rewards_templates_in_order(template_dir: Path) -> None:
    """``canonical`` may give several reward names (a route with several rewards): the first with a
    template serves the type; the error lists each name tried once."""
    registry, _ = registry_of(template_dir)
    routes = {"counting": ["nothing_here", "qa", "mc"], "tint": ["shade", "tint"]}.__getitem__
    assert render_prompt(registry, {"problem": "How many?", "problem_type": "counting"}, thinking=True,
                         canonical=routes) == "How many? Think first."  # fmt: skip
    with pytest.raises(UnknownComponentError, match=r"tried tint, shade\)"):
        find_template(registry, "tint", thinking=False, canonical=routes)
