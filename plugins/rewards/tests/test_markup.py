"""Golden cases of the SVG and HTML rewards: structural comparison (0.9·accuracy + 0.1·format)."""

from __future__ import annotations

from videorl.api import RewardInput
from videorl.testing import assert_reward_contract
from videorl_rewards.markup import HTMLReward, SVGReward

SVG = (
    '<svg width="100" height="100"><rect x="10" y="10" width="30" height="30" fill="red"/>'
    '<circle cx="50" cy="50" r="20" fill="blue"/></svg>'
)  # tag paths: svg, svg/rect, svg/circle; attributes: 2 + 5 + 4 = 11; no text
HTML = '<html><body><h1>Title</h1><p class="x">Hello world</p></body></html>'
# tag paths: #document, html, body, h1, p (5); attributes: p@class (1); words: title, hello, world


def svg(response: str, expected: float) -> tuple[RewardInput, float]:
    return RewardInput(response, "svg-code", SVG, sample_id="svg"), expected


def html(response: str, expected: float) -> tuple[RewardInput, float]:
    return RewardInput(response, "html-code", HTML, sample_id="html"), expected


BOMB = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;">]><svg>&lol2;</svg>'
)


def test_svg_golden_cases() -> None:
    cases = [
        svg(f"<answer>{SVG}</answer>", 1.0),
        # one attribute value of 11 differs: tags 1, attributes 10/11; no text on either side
        svg(f"<answer>{SVG.replace('blue', 'green')}</answer>", 0.9 * (0.5 + 0.3 * 10 / 11) / 0.8 + 0.1),
        # no circle: tags P=1 R=2/3 → 0.8; attributes P=1 R=7/11 → 14/18
        svg(
            f"<answer>{SVG.split('<circle')[0]}</svg></answer>", 0.9 * (0.5 * 0.8 + 0.3 * 14 / 18) / 0.8 + 0.1
        ),
        svg("<answer><div>hi</div></answer>", 0.05),
        svg("<answer><svg><rect></svg></answer>", 0.05),  # not well-formed
        svg(f"<answer>{BOMB}</answer>", 0.05),  # entities refused
        svg("", 0.0),
        svg(f"<answer>```svg\n{SVG}\n```</answer>", 1.0),
        svg("<answer>" + SVG.replace('width="100"', 'width="100.0"') + "</answer>", 1.0),  # same number
        svg("<answer>" + SVG.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ') + "</answer>", 1.0),
        # the last answer counts: only the root tag matches (tags P=1 R=1/3 → 0.5; attributes 0)
        svg(f"<answer>{SVG}</answer><answer><svg/></answer>", 0.9 * (0.5 * 0.5) / 0.8 + 0.1),
    ]
    assert_reward_contract(SVGReward(), cases)


def test_html_golden_cases() -> None:
    cases = [
        html(f"<answer>{HTML}</answer>", 1.0),
        html(f"<answer>{HTML.replace('world', 'there')}</answer>", 0.9 * (0.5 + 0.3 + 0.2 * 2 / 3) + 0.1),
        html("<answer>" + HTML.replace(' class="x"', "") + "</answer>", 0.9 * (0.5 + 0.2) + 0.1),
        html("<answer>Hello</answer>", 0.05),  # no element
        html("", 0.0),
        html(f"<answer>{HTML.replace('h1', 'h2')}</answer>", 0.9 * (0.5 * 0.8 + 0.3 + 0.2) + 0.1),
        # unclosed h1: p nests inside it, so its path and attribute differ
        html("<answer><html><body><h1>Title<p class=x>Hello world</answer>", 0.9 * (0.5 * 0.8 + 0.2) + 0.1),
        html("<answer>" + "<b>" * 300_000 + "</answer>", 0.05),  # too long
        html(f"<answer>```html\n{HTML}\n```</answer>", 1.0),
        html(f"<answer>{HTML.upper()}</answer>", 1.0),  # tags, values and words compare case-insensitively
    ]
    assert_reward_contract(HTMLReward(), cases)
