"""Prompt templates: Jinja2 templates per ``problem_type``, variant and model family, rendered with a
sample's fields.

Names (what ``register_prompt_templates`` registers and :func:`find_template` looks up)::

    multiple_choice                     non-thinking, any model family
    multiple_choice/thinking            thinking, any model family
    multiple_choice@qwen2_5_vl          non-thinking, for one model family
    multiple_choice/thinking@qwen2_5_vl thinking, for one model family

A lookup tries the family's template first, then the generic one, for the sample's ``problem_type``
and then for the names of the rewards that score it (so ``"free-form"`` finds ``open_ended``, and a
type routed by ``rewards.routes`` finds its reward's templates). Templates use
``StrictUndefined``: a field the sample does not have is a ``DataError`` naming the template and the
field. Besides the sample's fields, a template sees ``thinking`` (bool) and ``family`` (str or None).
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from videorl.data.sample import ID_KEYS
from videorl.errors import DataError, UnknownComponentError
from videorl.registry import Register, Registry

__all__ = ["PromptTemplate", "find_template", "register_template_dir", "render_prompt", "template_name"]

_SUFFIX = ".jinja"


class PromptTemplate:
    """One Jinja2 template. ``source`` is the text, or ``path`` a file read on first use (other files
    under ``root`` can be ``{% include %}``d or ``{% extends %}``ed). ``variables`` are fixed values
    (e.g. ``thinking``) and ``globals`` functions the template may call."""

    def __init__(
        self,
        name: str,
        source: str | None = None,
        *,
        path: Path | str | None = None,
        root: Path | str | None = None,
        variables: Mapping[str, Any] | None = None,
        globals: Mapping[str, Any] | None = None,
    ) -> None:
        if (source is None) == (path is None):
            raise TypeError(f"prompt template {name!r}: give exactly one of source and path")
        self.name = name
        self.source = source
        self.path = Path(path) if path is not None else None
        self.root = Path(root) if root is not None else (self.path.parent if self.path else None)
        self.variables = dict(variables or {})
        self.globals = dict(globals or {})
        self._template: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PromptTemplate({self.name!r}, {str(self.path) if self.path else 'inline'})"

    @property
    def where(self) -> str:
        """The template's name and, for a file, its path (for messages)."""
        return f"{self.name!r}" + (f" ({self.path})" if self.path else "")

    def _compiled(self) -> Any:
        with self._lock:
            if self._template is None:
                import jinja2

                loader = jinja2.FileSystemLoader(str(self.root)) if self.root else None
                env = jinja2.Environment(
                    loader=loader,
                    undefined=jinja2.StrictUndefined,
                    trim_blocks=True,
                    lstrip_blocks=True,
                    autoescape=False,
                )
                env.globals.update(self.globals)
                try:
                    if (
                        self.path is not None
                        and self.root is not None
                        and self.path.is_relative_to(self.root)
                    ):
                        self._template = env.get_template(self.path.relative_to(self.root).as_posix())
                    else:
                        text = self.source if self.source is not None else Path(self.path or "").read_text()
                        self._template = env.from_string(text)
                except jinja2.TemplateError as exc:
                    raise DataError(f"prompt template {self.where} does not compile: {exc}") from exc
            return self._template

    def render(self, fields: Mapping[str, Any]) -> str:
        """The prompt text for ``fields``; a missing field raises ``DataError`` naming it."""
        import jinja2

        template = self._compiled()
        values = {**fields, **self.variables}
        try:
            return str(template.render(values)).strip()
        except jinja2.UndefinedError as exc:
            match = re.search(r"'([^']+)' is undefined|has no attribute '([^']+)'", str(exc))
            field = (match.group(1) or match.group(2)) if match else str(exc)
            sample = next((str(fields[k]) for k in ID_KEYS if fields.get(k) is not None), None)
            of = f" of sample {sample!r}" if sample else ""
            raise DataError(
                f"prompt template {self.where} references field {field!r}, which the fields{of} do not "
                f"have (given: {', '.join(sorted(values)) or 'none'}). Add the field to the sample or "
                "fix the template."
            ) from exc

    def __call__(self, **fields: Any) -> str:
        return self.render(fields)


def template_name(problem_type: str, *, thinking: bool = False, family: str | None = None) -> str:
    """The registry name of a template: ``problem_type[/thinking][@family]``."""
    return problem_type + ("/thinking" if thinking else "") + (f"@{family}" if family else "")


def register_template_dir(
    register: Register,
    directory: Path | str,
    *,
    globals: Mapping[str, Any] | None = None,
    aliases: Mapping[str, Sequence[str]] | None = None,
) -> list[str]:
    """Register every ``*.jinja`` file of ``directory`` (files starting with ``_`` are partials).

    ``TYPE.jinja`` serves both variants: it is registered as ``TYPE`` (rendered with ``thinking``
    false) and as ``TYPE/thinking`` (``thinking`` true), unless ``TYPE.thinking.jinja`` exists, which
    then is the thinking variant. ``TYPE@FAMILY.jinja`` and ``TYPE.thinking@FAMILY.jinja`` do the same
    for one model family. ``aliases`` maps a problem type to further spellings that find its templates
    (``{"open_ended": ["free-form"]}`` makes ``free-form/thinking`` an alias of ``open_ended/thinking``).
    Returns the registered names. Reading the directory is cheap; files are read on first use.
    """
    root = Path(directory)
    files = sorted(p for p in root.glob(f"*{_SUFFIX}") if not p.name.startswith("_"))
    stems = {p.name[: -len(_SUFFIX)] for p in files}
    names: list[str] = []
    for path in files:
        stem = path.name[: -len(_SUFFIX)]
        base, _, family = stem.partition("@")
        problem_type, dot, variant = base.partition(".")
        if dot and variant != "thinking":
            raise ValueError(f"{path}: the only variant a template file may name is '.thinking'")
        thinking_file = f"{problem_type}.thinking" + (f"@{family}" if family else "")
        variants = [True] if variant else ([False] if thinking_file in stems else [False, True])
        for thinking in variants:
            name = template_name(problem_type, thinking=thinking, family=family or None)
            template = PromptTemplate(
                name, path=path, root=root, variables={"thinking": thinking}, globals=globals
            )
            spellings = [
                template_name(alias, thinking=thinking, family=family or None)
                for alias in (aliases or {}).get(problem_type, ())
            ]
            register(name, template, aliases=spellings, description=f"prompt template {path.name}")
            names.append(name)
    return names


def find_template(
    registry: Registry[Any],
    problem_type: str,
    *,
    thinking: bool,
    family: str | None = None,
    canonical: Callable[[str], str | Sequence[str]] | None = None,
) -> PromptTemplate:
    """The template for ``problem_type`` (then its rewards' names), family-specific first.

    ``canonical`` maps a problem type to its reward's name or names (the reward registry's
    ``canonical``, or a router's ``reward_names``, which follows ``rewards.routes``); it may raise
    ``LookupError`` for an unknown type. No template raises ``UnknownComponentError`` naming what was tried.
    """
    types = [problem_type]
    if canonical is not None:
        with contextlib.suppress(LookupError):  # an unknown type adds nothing to try
            names = canonical(problem_type)
            types += [names] if isinstance(names, str) else list(names)
    tried: list[str] = []
    for kind in types:
        for fam in ([family] if family else []) + [None]:
            name = template_name(kind, thinking=thinking, family=fam)
            if name in tried:
                continue
            tried.append(name)
            if name in registry:
                template: PromptTemplate = registry.get(name)
                return template
    variant = "thinking" if thinking else "non-thinking"
    raise UnknownComponentError(
        f"no {variant} prompt template for problem_type {problem_type!r} (tried {', '.join(tried)}). "
        f"Registered templates: {', '.join(registry.names()) or '(none)'}. A reward plugin registers "
        "templates with the register_prompt_templates hook."
    )


def render_prompt(
    registry: Registry[Any],
    sample: Mapping[str, Any],
    *,
    thinking: bool,
    family: str | None = None,
    canonical: Callable[[str], str | Sequence[str]] | None = None,
) -> str:
    """The prompt text for ``sample`` (a mapping with a ``problem_type``)."""
    problem_type = sample.get("problem_type")
    if not isinstance(problem_type, str) or not problem_type:
        raise DataError(f"sample {sample.get('id', '?')!r} has no problem_type to choose a prompt template")
    template = find_template(registry, problem_type, thinking=thinking, family=family, canonical=canonical)
    return template.render({**sample, "family": family})
