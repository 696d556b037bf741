"""Where the answer sits in a response: ``<think>``/``<answer>`` tags, ``\\boxed{}``, final statements."""

from __future__ import annotations

import re

# --- tags ----------------------------------------------------------------------------------------

_TAG = re.compile(r"<\s*(/?)\s*(think|answer)\s*>", re.IGNORECASE)


def normalize_tags(text: str) -> str:
    """Repair the spelling of ``<think>``/``<answer>`` tags (``< /ANSWER >`` → ``</answer>``)."""
    return _TAG.sub(lambda m: f"<{m.group(1)}{m.group(2).lower()}>", text)


def extract_tag(text: str, tag: str = "answer") -> str | None:
    """The stripped content of the last complete ``<tag>…</tag>``; ``None`` when there is none.

    ``text`` should have gone through :func:`normalize_tags` (done here when the exact tags are absent).
    """
    close = f"</{tag}>"
    if close not in text:
        text = normalize_tags(text)
    end = text.rfind(close)
    if end < 0:
        return None
    opening = f"<{tag}>"
    start = text.rfind(opening, 0, end)
    if start < 0:
        return None
    return text[start + len(opening) : end].strip()


def strip_think(text: str) -> str:
    """``text`` without its reasoning: what follows the last ``</think>``, else ``text`` minus an unclosed
    ``<think>…``."""
    text = normalize_tags(text)
    end = text.rfind("</think>")
    if end >= 0:
        return text[end + len("</think>") :].strip()
    start = text.find("<think>")
    return (text[:start] if start >= 0 else text).strip()


# --- boxed and final statements ------------------------------------------------------------------

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")


def _matching_braces(text: str) -> dict[int, int]:
    """Index of each ``{`` → index of its ``}``, in one pass (unbalanced ones are absent)."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            pairs[stack.pop()] = i
    return pairs


def extract_boxed(text: str) -> str | None:
    """The content of the last brace-balanced ``\\boxed{…}`` (or ``\\fbox{…}``, or ``\\boxed X``)."""
    matches = list(_BOXED.finditer(text))
    if not matches:
        return None
    pairs: dict[int, int] | None = None
    for match in reversed(matches):
        i = match.end()
        if i < len(text) and text[i] == "{":
            if pairs is None:
                pairs = _matching_braces(text)
            if i in pairs:
                return text[i + 1 : pairs[i]].strip()
            continue  # unbalanced: try an earlier one
        word = re.match(r"[^\s$]+", text[i:])
        if word:
            return word.group(0)
    return None


_FINAL = re.compile(
    r"(?:final\s+answer|the\s+(?:correct\s+|best\s+|right\s+)?(?:answer|option|choice))"
    r"(?:\s+(?:is|would\s+be|should\s+be|will\s+be)\s*[:：]?|\s*[:：])\s*(\S.*)$",
    re.IGNORECASE | re.MULTILINE,
)


def final_statement(text: str) -> str | None:
    """The answer in the last "…the (final) answer is X" / "Final answer: X" line, with a ``\\boxed{}`` inside
    preferred."""
    last = None
    for last in _FINAL.finditer(text):  # noqa: B007 - only the last match is wanted
        pass
    if last is None:
        return None
    found = last.group(1).strip()
    boxed = extract_boxed(found)
    if boxed is not None:
        return boxed
    found = found.rstrip(".。;；").strip()
    return strip_math_delimiters(found) or None


def strip_math_delimiters(text: str) -> str:
    """``text`` without one pair of wrapping ``$…$``, ``$$…$$``, ``\\(…\\)`` or ``\\[…\\]``."""
    text = text.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(text) >= len(left) + len(right) and text.startswith(left) and text.endswith(right):
            return text[len(left) : len(text) - len(right)].strip()
    return text


def answer_candidates(response: str) -> list[str]:
    """Where an answer may sit in a response without ``<answer>`` tags, best first.

    The final statement ("the final answer is X"), the last ``\\boxed{}``, the text after the reasoning,
    and the whole text. Used only when a response has no ``<answer>`` tag and the fallback is enabled.
    """
    out: list[str] = []
    visible = strip_think(response)
    for candidate in (final_statement(visible), extract_boxed(visible), visible):
        if candidate and candidate not in out:
            out.append(candidate)
    return out


def answer_text(response: str) -> str:
    """The answer part of a whole response: the last ``<answer>`` content (even empty), else the first of
    :func:`answer_candidates`, else ``""``."""
    tagged = extract_tag(response)
    if tagged is not None:
        return tagged
    candidates = answer_candidates(response)
    return candidates[0] if candidates else ""
