"""The format rule: which response layouts earn the format part of a task reward."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from videorl.answers import extract_tag, normalize_tags
from videorl.errors import ConfigError
from videorl.option import option

THINK_MODES = ("optional", "required")

_STRICT = re.compile(
    r"\s*(?:(?:<think>)?(?P<think>.*?)</think>\s*)?<answer>(?P<answer>.*?)</answer>\s*", re.DOTALL
)


@dataclass(frozen=True)
class FormatRule:
    """What a well-formed response looks like.

    - An ``<answer>…</answer>`` is always required; the last one counts.
    - ``think="optional"`` (default, EasyVideoR1): reasoning in ``<think>…</think>`` may come first.
      ``"required"``: a non-empty ``<think>…</think>`` must close before the last ``<answer>``. A response
      that starts inside the reasoning (the chat template opened ``<think>``) and closes it with
      ``</think>`` counts as having it.
    - ``strict=True`` (Video-R1, OneThinker): nothing but whitespace outside the tags, one ``<answer>``
      and at most one ``<think>`` block, in that order.

    Tag spelling is repaired first (``< /answer >`` reads as ``</answer>``).
    """

    think: Literal["optional", "required"] = option(
        "optional", "optional: reasoning in <think>…</think> may come first; required: it must."
    )
    strict: bool = option(
        False, "Nothing but whitespace outside the tags, one <answer>, at most one <think>."
    )

    def __post_init__(self) -> None:
        if self.think not in THINK_MODES:
            raise ConfigError(f"format.think must be one of {', '.join(THINK_MODES)}, got {self.think!r}")
        if not isinstance(self.strict, bool):
            raise ConfigError(f"format.strict must be true or false, got {self.strict!r}")

    @classmethod
    def from_value(cls, value: FormatRule | Mapping[str, Any] | None) -> FormatRule:
        """A rule from itself, a mapping of its fields (unknown keys are a ``ConfigError``) or ``None``."""
        if value is None:
            return cls()
        if isinstance(value, FormatRule):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(
                f"format must be a mapping like {{think: optional, strict: false}}, got {value!r}"
            )
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise ConfigError(
                f"unknown format key(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}"
            )
        return cls(**dict(value))

    def check(self, response: str) -> bool:
        """Whether ``response`` has the required tags in the required order (its content is not judged)."""
        text = normalize_tags(response)
        if self.strict:
            match = _STRICT.fullmatch(text)
            if (
                match is None
                or "<answer>" in match.group("answer")
                or "<think>" in (match.group("think") or "")
            ):
                return False
            return self.think == "optional" or bool((match.group("think") or "").strip())
        if extract_tag(text) is None:
            return False
        if self.think == "optional":
            return True
        answer_at = text.rfind("<answer>", 0, text.rfind("</answer>"))
        close = text.rfind("</think>", 0, answer_at)
        if close < 0:
            return False
        opening = text.rfind("<think>", 0, close)
        reasoning = text[opening + len("<think>") : close] if opening >= 0 else text[:close]
        return bool(reasoning.strip())
