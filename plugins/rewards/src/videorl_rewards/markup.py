"""SVG and HTML code: the answer's markup, parsed, compared structurally with the reference."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter
from html.parser import HTMLParser
from typing import Any

from videorl.api import RewardInput, TaskReward

_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
_FENCE = re.compile(r"```[ \t]*(?:svg|html|xml)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_MAX_CHARS = 200_000


class Node:
    """An element: tag, attributes, text and children."""

    def __init__(self, tag: str, attrs: dict[str, str]) -> None:
        self.tag = tag
        self.attrs = attrs
        self.text: list[str] = []
        self.children: list[Node] = []


def _local(name: str) -> str:
    return name.rsplit("}", 1)[-1].rsplit(":", 1)[-1].casefold()


def parse_svg(text: str) -> Node | None:
    """The ``<svg>`` element of ``text`` (through the last ``</svg>``, or a self-closing ``<svg/>``) as a
    :class:`Node` tree; ``None`` if absent or not well-formed
    (DTDs and entities are refused, so no entity expansion can blow up)."""
    start, end = text.find("<svg"), text.rfind("</svg>")
    if start < 0 or "<!DOCTYPE" in text.upper() or "<!ENTITY" in text.upper():
        return None
    try:
        root = ET.fromstring(text[start : end + len("</svg>")] if end > start else text[start:].strip())
    except (ET.ParseError, ValueError, RecursionError):
        return None

    def convert(element: ET.Element) -> Node:
        node = Node(_local(element.tag), {_local(k): v for k, v in element.attrib.items()})
        node.text = [t for t in (element.text, *(c.tail for c in element)) if t and t.strip()]
        node.children = [convert(c) for c in element]
        return node

    return convert(root)


class _HTMLTree(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]
        self.elements = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag.casefold(), {k.casefold(): v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        self.elements += 1
        if node.tag not in _VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        tag = tag.casefold()
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        if data.strip():
            self.stack[-1].text.append(data)


def parse_html(text: str) -> Node | None:
    """The document of ``text`` as a :class:`Node` tree; ``None`` when it holds no element."""
    parser = _HTMLTree()
    try:
        parser.feed(text)
        parser.close()
    except (AssertionError, ValueError):
        return None
    return parser.root if parser.elements else None


def _normalize_value(value: str) -> str:
    value = " ".join(value.split()).casefold()
    try:
        return f"{round(float(value), 1):g}"
    except ValueError:
        return value


def features(root: Node) -> tuple[Counter[str], Counter[str], Counter[str]]:
    """Multisets of tag paths (``svg/g/rect``), attributes (``path@name=value``) and text words."""
    paths: Counter[str] = Counter()
    attrs: Counter[str] = Counter()
    words: Counter[str] = Counter()
    stack = [(root, root.tag)]
    while stack:
        node, path = stack.pop()
        paths[path] += 1
        for name, value in node.attrs.items():
            attrs[f"{path}@{name}={_normalize_value(value)}"] += 1
        for text in node.text:
            words.update(re.findall(r"\w+", text.casefold()))
        stack.extend((child, f"{path}/{child.tag}") for child in node.children)
    return paths, attrs, words


def _f1(pred: Counter[str], truth: Counter[str]) -> float:
    overlap = sum((pred & truth).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / sum(pred.values()), overlap / sum(truth.values())
    return 2 * precision * recall / (precision + recall)


def structural_similarity(pred: Node, truth: Node) -> float:
    """0.5·F1(tag paths) + 0.3·F1(attributes) + 0.2·F1(text words); a component both sides lack is
    left out and the weights of the others rescaled."""
    total = weight_sum = 0.0
    for weight, p, t in zip((0.5, 0.3, 0.2), features(pred), features(truth), strict=True):
        if p or t:
            total += weight * _f1(p, t)
            weight_sum += weight
    return total / weight_sum if weight_sum else 0.0


def _markup(text: str) -> str:
    blocks = _FENCE.findall(text)
    return blocks[-1] if blocks else text


class SVGReward(TaskReward):
    """Accuracy = :func:`structural_similarity` of the answer's ``<svg>`` and the reference's. An answer
    without a well-formed ``<svg>…</svg>`` does not fit the type. Not rendered."""

    name = "svg_code"

    def parse_answer(self, text: Any, inp: RewardInput) -> Node | None:
        text = _markup(str(text))
        return parse_svg(text) if len(text) <= _MAX_CHARS else None

    def accuracy(self, answer: Node, truth: Node, inp: RewardInput) -> float:
        return structural_similarity(answer, truth)


class HTMLReward(TaskReward):
    """Accuracy = :func:`structural_similarity` of the answer's HTML and the reference's. An answer
    without any element does not fit the type. Not rendered."""

    name = "html_code"

    def parse_answer(self, text: Any, inp: RewardInput) -> Node | None:
        text = _markup(str(text))
        return parse_html(text) if len(text) <= _MAX_CHARS else None

    def accuracy(self, answer: Node, truth: Node, inp: RewardInput) -> float:
        return structural_similarity(answer, truth)
