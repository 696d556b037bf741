"""The plugin as installed: every registered reward keeps the contract, the issue's problem_type
spellings route, templates exist for every type, third-party rewards route, ``videorl reward`` works."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from videorl.api import (
    MediaInfo,
    PromptTemplate,
    RewardInput,
    RewardRouter,
    TaskReward,
    hookimpl,
    render_prompt,
)
from videorl.testing import assert_reward_contract
from videorl_rewards.plugin import REWARDS

MEDIA = MediaInfo(width=640, height=480, resized_width=320, resized_height=240)
#: one hand-computed correct case per reward: (problem_type, ground truth, response, extra fields)
CORRECT: dict[str, tuple[str, Any, str, dict[str, Any]]] = {
    "multiple_choice": ("multiple choice", "C", "<answer>C</answer>", {"options": ["A. a", "B. b", "C. c"]}),
    "numerical": ("numerical", "12", "<answer>12</answer>", {}),
    "regression": ("regression", "2.5", "<answer>2.5</answer>", {}),
    "temporal_grounding": ("temporal grounding", '{"time": [1, 3]}', '<answer>{"time": [1, 3]}</answer>', {}),
    "spatial_grounding": ("spatial grounding", "[64, 48, 320, 240]",
                          '<answer>{"boxes": [100, 100, 500, 500]}</answer>', {}),
    "spatial_temporal_grounding": (
        "spatial-temporal grounding", '{"time": [0, 1], "boxes": {"0": [0, 0, 320, 240]}}',
        '<answer>{"time": [0, 1], "boxes": {"0": [0, 0, 500, 500]}}</answer>', {},
    ),
    "tracking": ("tracking", '{"boxes": {"0": [0, 0, 640, 480]}}',
                 '<answer>{"boxes": {"0": [0, 0, 1000, 1000]}}</answer>', {}),
    "open_ended": ("open-ended", "a man rides a bike", "<answer>A man rides a bike.</answer>", {}),
    "math": ("math", "\\sqrt{8}", "<answer>2\\sqrt{2}</answer>", {}),
    "ocr": ("ocr", "STOP", "<answer>stop</answer>", {}),
    "boolean": ("boolean", "no", "<answer>No</answer>", {}),
    "code": ("code", "", "<answer>def f(x):\n    return x * 2</answer>", {"tests": ["assert f(2) == 4"]}),
    "svg_code": ("svg-code", "<svg><rect x='1'/></svg>", "<answer><svg><rect x='1'/></svg></answer>", {}),
    "html_code": ("html-code", "<p>hi</p>", "<answer><p>hi</p></answer>", {}),
    "critic": ("critic", "Response 1", "<answer>Response 1</answer>", {}),
}  # fmt: skip


@pytest.fixture(scope="module")
def router() -> Any:
    from videorl.plugins import load_plugins

    plugins = load_plugins(disable=[])
    assert plugins.infos["videorl-rewards"].status == "ok"
    router = RewardRouter.from_registry(plugins.rewards)
    yield router
    router.reward("math").close()


@pytest.mark.slow
def test_every_registered_reward_keeps_the_contract(router: Any) -> None:
    assert sorted(router.names) == sorted(name for name, *_ in REWARDS) == sorted(CORRECT)
    for name, (problem_type, truth, response, fields) in CORRECT.items():
        extra = {k: v for k, v in fields.items() if k != "options"}
        options = fields.get("options")
        inp = RewardInput(
            response, problem_type, truth, options=options, media=MEDIA, model_family="qwen3_vl", extra=extra
        )
        assert router.route(problem_type) == [(name, 1.0)], problem_type
        assert_reward_contract(router.reward(name), [(inp, 1.0)])


@pytest.mark.parametrize(
    ("problem_type", "reward"),
    [
        ("multiple choice", "multiple_choice"), ("numerical", "numerical"), ("regression", "regression"),
        ("temporal grounding", "temporal_grounding"), ("spatial grounding", "spatial_grounding"),
        ("spatial-temporal grounding", "spatial_temporal_grounding"), ("tracking", "tracking"),
        ("open-ended", "open_ended"), ("free-form", "open_ended"), ("video qa", "open_ended"),
        ("math", "math"), ("OCR", "ocr"), ("boolean", "boolean"), ("binary classification", "boolean"),
        ("svg-code", "svg_code"),
        ("html-code", "html_code"), ("code", "code"), ("critic", "critic"), ("llava", "critic"),
    ],
)  # fmt: skip
def test_issue_spellings_route(router: Any, problem_type: str, reward: str) -> None:
    assert router.route(problem_type) == [(reward, 1.0)]


def test_templates_for_every_type(router: Any) -> None:
    from videorl.plugins import load_plugins

    plugins = load_plugins()
    for name, (problem_type, _, _, fields) in CORRECT.items():
        sample = {"id": name, "problem": "<video>\nQ?", "problem_type": problem_type, **fields}
        for thinking in (False, True):
            for family in (None, "qwen2_5_vl", "qwen3_vl"):
                text = render_prompt(plugins.prompt_templates, sample, thinking=thinking, family=family)
                assert text.startswith("<video>\nQ?") and "<answer>" in text, (name, thinking, family)
                assert ("<think>" in text) == thinking
    spatial = {"problem": "Where?", "problem_type": "spatial grounding"}
    pixels = render_prompt(plugins.prompt_templates, spatial, thinking=False, family="qwen2_5_vl")
    grid = render_prompt(plugins.prompt_templates, spatial, thinking=False, family="qwen3_vl")
    assert "absolute pixel coordinates" in pixels and "0-1000 grid" in grid


class CountingReward(TaskReward):
    """A third party's reward: counts, exact."""

    name = "counting"

    def parse_answer(self, text: Any, inp: RewardInput) -> int | None:
        return int(text) if str(text).strip().isdigit() else None

    def accuracy(self, answer: int, truth: int, inp: RewardInput) -> float:
        return float(answer == truth)


class CountingPlugin:
    @staticmethod
    @hookimpl
    def register_rewards(register: Any) -> None:
        register("counting", CountingReward, aliases=["object counting"])

    @staticmethod
    @hookimpl
    def register_prompt_templates(register: Any) -> None:
        register("counting", PromptTemplate("counting", "{{ problem }} Answer with <answer>N</answer>."))


def rows_file(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_third_party_reward_is_routed_once_installed(
    fake_entry_points: Any, run_cli: Any, videorl_plugins: Any, tmp_path: Path
) -> None:
    fake_entry_points({"videorl-rewards": "videorl_rewards.plugin", "videorl-counting": CountingPlugin})
    rows = rows_file(
        tmp_path / "rows.jsonl",
        [
            {"id": "1", "problem_type": "object counting", "answer": "3",
             "responses": ["<answer>3</answer>", "<answer>4</answer>"]},
            {"id": "2", "problem_type": "multiple choice", "options": ["A. x", "B. y"], "answer": "B",
             "response": "<answer>B</answer>"},
        ],
    )  # fmt: skip
    out = tmp_path / "out.jsonl"
    run_cli("reward", "--input", str(rows), "--output", str(out)).assert_success()
    assert [json.loads(line)["scores"] for line in out.read_text().splitlines()] == [[1.0, 0.1], [1.0]]
    plugins = videorl_plugins(CountingPlugin)
    sample = {"problem": "How many?", "problem_type": "object counting"}
    text = render_prompt(
        plugins.prompt_templates, sample, thinking=False, canonical=plugins.rewards.canonical
    )
    assert text == "How many? Answer with <answer>N</answer>."


MIXED = [
    {"id": "mc", "problem_type": "multiple choice", "options": ["A. x", "B. y"], "answer": "A",
     "responses": ["<answer>A</answer>", "<answer>B</answer>"]},
    {"id": "num", "problem_type": "numerical", "answer": "7", "response": "<answer>seven</answer>"},
    {"id": "tg", "problem_type": "temporal grounding", "answer": {"time": [0, 4]},
     "response": '<answer>{"time": [2, 4]}</answer>'},
    {"id": "oe", "problem_type": "free-form", "answer": "a red car",
     "response": "<answer>a red car</answer>"},
    {"id": "m", "problem_type": "math", "answer": "\\frac{1}{3}", "response": "<answer>2/6</answer>"},
    {"id": "st", "problem_type": "tracking", "answer": {"boxes": {"0": [0, 0, 10, 10], "1": [0, 0, 10, 10]}},
     "box_convention": "grid1000", "response": '<answer>{"boxes": {"0": [0, 0, 10, 10]}}</answer>'},
]  # fmt: skip
EXPECTED = [[1.0, 0.1], [1.0], [0.9 * 0.5 + 0.1], [1.0], [1.0], [0.9 * 0.5 + 0.1]]


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_reward_command_with_workers(run_cli: Any, tmp_path: Path, workers: int) -> None:
    rows = rows_file(tmp_path / "rows.jsonl", MIXED * 3)
    out = tmp_path / "out.jsonl"
    result = run_cli("reward", "--input", str(rows), "--output", str(out), "--workers", str(workers))
    result.assert_success()
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in scored] == [r["id"] for r in MIXED] * 3
    flat = [score for r in scored for score in r["scores"]]
    assert flat == pytest.approx([score for scores in EXPECTED * 3 for score in scores])
