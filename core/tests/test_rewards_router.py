"""RewardRouter: routing by problem_type, validation at load time, weights, and safety."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from typing import Any

import pytest

from videorl.api import hookimpl
from videorl.config import load_rewards
from videorl.data.sample import Sample
from videorl.errors import ConfigError, DataError
from videorl.rewards import RewardConfig, RewardInput, RewardOutput, RewardRouter, TaskReward


def row(problem_type: str, sample_id: str = "", truth: Any = None, origin: str = "") -> Sample:
    """A loaded dataset row, as the router validates it."""
    return Sample(sample_id, "text", "", problem_type, truth, origin=origin)


def inp(problem_type: str, response: str = "", sample_id: str = "s", truth: Any = None) -> RewardInput:
    return RewardInput(response=response, problem_type=problem_type, ground_truth=truth, sample_id=sample_id)


class Const:
    def __init__(self, value: float) -> None:
        self.value = value
        self.calls = 0

    def __call__(self, x: RewardInput) -> RewardOutput:
        self.calls += 1
        return RewardOutput(self.value, {"accuracy": self.value})


class Echo:
    """Scores the response as a float: lets one test exercise many outcomes."""

    def __call__(self, x: RewardInput) -> Any:
        if x.response == "raise":
            raise ValueError("boom")
        if x.response == "hang":
            threading.Event().wait(3)
        if x.response == "none":
            return None
        if x.response == "float":
            return 0.5
        if x.response == "bad part":
            return RewardOutput(0.5, {"x": math.nan})
        return RewardOutput(float(x.response))


def test_routes_by_name_and_alias() -> None:
    a, b = Const(0.25), Const(0.75)
    router = RewardRouter.of({"multiple_choice": a, "open_ended": b}, aliases={"free-form": "open_ended"})
    outs = router.score([inp("Multiple Choice"), inp("multiple-choice"), inp("free form"), inp("OPEN_ENDED")])
    assert [o.score for o in outs if o] == [0.25, 0.25, 0.75, 0.75]
    assert (a.calls, b.calls) == (2, 2)
    assert router.route("free-form") == [("open_ended", 1.0)]
    assert router.route("nope") is None


def test_validate_names_type_sample_and_registered_types() -> None:
    router = RewardRouter.of(
        {"multiple_choice": Const(1), "math": Const(1)}, aliases={"mc": "multiple_choice"}
    )
    router.validate([row("mc", "a"), row("math", "7")])
    samples = [row("math", "ok"), row("counting", "q17", origin="d.jsonl:2"), row("counting", "q18"),
               row("dancing", "q19")]  # fmt: skip
    with pytest.raises(DataError) as err:
        router.validate(samples)
    message = str(err.value)
    assert "problem_type 'counting' of sample 'q17' (d.jsonl:2) and 1 more sample(s) has no reward" in message
    assert "Registered problem types: math; multiple_choice (also mc)" in message
    assert "Other unknown problem types: 'dancing'" in message
    with pytest.raises(DataError, match="sample '#0' has no problem_type"):
        router.validate([row("")])


def test_validate_creates_each_reward_once() -> None:
    created = []

    def factory() -> Const:
        created.append(1)
        return Const(1.0)

    router = RewardRouter({"math": factory})
    router.validate([row("math", "s1"), row("math", "s2")])
    router.score([inp("math")])
    assert created == [1]


def test_weighted_routes_and_abstention() -> None:
    config = load_rewards({"routes": {"qa": {"a": 0.5, "b": 2.0}, "solo": [{"reward": "b", "weight": 0.5}]}})
    router = RewardRouter.of({"a": Const(0.4), "b": Const(0.3), "c": Echo()}, config=config)
    qa, solo = router.score([inp("qa"), inp("solo")])
    assert qa is not None and solo is not None
    assert qa.score == pytest.approx(0.5 * 0.4 + 2.0 * 0.3)
    assert qa.parts == {"a": 0.4, "a/accuracy": 0.4, "b": 0.3, "b/accuracy": 0.3}
    assert solo.score == pytest.approx(0.15)
    assert router.score([inp("c", "none")]) == [None]
    both = RewardRouter.of(
        {"a": Const(0.4), "c": Echo()}, config=load_rewards({"routes": {"x": {"a": 1, "c": 1}}})
    )
    only_a = both.score([inp("x", "none")])[0]
    assert only_a is not None and only_a.score == pytest.approx(0.4)


def test_failures_score_zero_with_counted_logged_events(caplog: pytest.LogCaptureFixture) -> None:
    router = RewardRouter.of({"echo": Echo()}, config=RewardConfig(timeout=0.3))
    responses = ["0.5", "raise", "1.5", "-0.1", "nan", "float", "bad part", "hang", "0.25"]
    with caplog.at_level(logging.WARNING, logger="videorl.rewards"):
        start = time.monotonic()
        outs = router.score([inp("echo", r, sample_id=f"id{i}") for i, r in enumerate(responses)])
        elapsed = time.monotonic() - start
    assert elapsed < 2.5  # the hang is cut at 0.3 s, not waited for
    assert [o.score for o in outs if o] == [0.5, 0, 0, 0, 0, 0, 0, 0, 0.25]
    errors = [o.error for o in outs if o]
    assert errors[0] is None and errors[-1] is None
    assert errors[1] == "error: ValueError: boom"
    assert errors[2] == "invalid_output: score 1.5 outside [0, 1]"
    assert errors[5] == "invalid_output: returned float, not RewardOutput or None"
    assert errors[6] == "invalid_output: part(s) x not finite numbers"
    assert errors[7] == "timeout: no result after 0.3 s"
    assert router.event_counts == {"error": 1, "invalid_output": 5, "timeout": 1}
    assert [e.sample_id for e in router.events] == ["id1", "id2", "id3", "id4", "id5", "id6", "id7"]
    assert "scored 0 on sample 'id1' (echo): error: ValueError: boom" in caplog.text
    assert "sample 'id7'" in caplog.text


def test_unknown_type_at_scoring_time_scores_zero() -> None:
    router = RewardRouter.of({"a": Const(1.0)})
    out = router.score([inp("zzz", sample_id="q")])[0]
    assert out is not None and out.score == 0.0 and out.error is not None and "zzz" in out.error
    assert router.event_counts["unknown_type"] == 1


class AsyncReward:
    async def __call__(self, x: RewardInput) -> RewardOutput:
        await asyncio.sleep(5 if x.response == "slow" else 0.01)
        return RewardOutput(0.6)


def test_async_rewards_run_concurrently_and_time_out() -> None:
    router = RewardRouter.of({"judge": AsyncReward()}, config=RewardConfig(timeout=0.5, threads=16))
    start = time.monotonic()
    outs = router.score([inp("judge", sample_id=str(i)) for i in range(16)] + [inp("judge", "slow")])
    assert time.monotonic() - start < 2.0  # 16 × 10 ms concurrently, the slow one cut at 0.5 s
    assert [o.score for o in outs if o] == [0.6] * 16 + [0.0]
    assert router.event_counts == {"timeout": 1}


def test_ascore_inside_an_event_loop() -> None:
    router = RewardRouter.of({"a": Const(0.5)})

    async def main() -> None:
        outs = await router.ascore([inp("a")])
        assert outs[0] is not None and outs[0].score == 0.5
        with pytest.raises(RuntimeError, match="await ascore"):
            router.score([inp("a")])

    asyncio.run(main())


class Batch:
    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.batches: list[int] = []

    def __call__(self, x: RewardInput) -> RewardOutput:  # pragma: no cover - the batch path is used
        raise AssertionError("score_batch should be used")

    def score_batch(self, xs: list[RewardInput]) -> list[RewardOutput | None]:
        self.batches.append(len(xs))
        if self.mode == "raise":
            raise RuntimeError("batch failed")
        if self.mode == "short":
            return [RewardOutput(1.0)]
        if self.mode == "hang":
            threading.Event().wait(3)
        return [RewardOutput(0.1 * i) for i in range(len(xs))]


def test_batch_rewards() -> None:
    batch = Batch()
    router = RewardRouter.of({"b": batch, "a": Const(1.0)})
    outs = router.score([inp("b"), inp("a"), inp("b"), inp("b")])
    assert batch.batches == [3]
    assert [o.score for o in outs if o] == pytest.approx([0.0, 1.0, 0.1, 0.2])
    for mode, message in [
        ("raise", "error: RuntimeError: batch failed"),
        ("short", "score_batch returned 1 results"),
    ]:
        failing = RewardRouter.of({"b": Batch(mode)})
        outs = failing.score([inp("b", sample_id="x"), inp("b", sample_id="y")])
        assert [o.score for o in outs if o] == [0.0, 0.0]
        assert outs[0] is not None and outs[0].error is not None and message in outs[0].error
    hanging = RewardRouter.of({"b": Batch("hang")}, config=RewardConfig(timeout=0.2))
    start = time.monotonic()
    outs = hanging.score([inp("b"), inp("b")])
    assert time.monotonic() - start < 2.0  # 0.2 s per input
    assert [o.error for o in outs if o] == ["timeout: batch of 2 timed out after 0.4 s"] * 2


def test_config_parsing() -> None:
    config = load_rewards(
        {
            "routes": {"Free Form": "open_ended", "qa": [["a", 0.5], {"reward": "b"}]},
            "format": {"think": "required"},
        }
    )
    assert config.routes == {"free_form": [("open_ended", 1.0)], "qa": [("a", 0.5), ("b", 1.0)]}
    assert config.format.think == "required"
    with pytest.raises(ConfigError, match="unknown key 'rewards.accuracy_wieght'. Did you mean"):
        load_rewards({"accuracy_wieght": 1})
    with pytest.raises(ConfigError, match="weight of 'a' must be a non-negative number"):
        load_rewards({"routes": {"qa": {"a": -1}}})
    with pytest.raises(ConfigError, match="rewards.timeout"):
        load_rewards({"timeout": 0})
    with pytest.raises(ConfigError, match="rewards.routes.qa names reward 'zzz', which is not registered"):
        RewardRouter.of({"a": Const(1)}, config=load_rewards({"routes": {"qa": "zzz"}}))


class Plugin:
    """A reward plugin: a class with options, registered lazily-free (the class itself)."""

    class Scaled:
        def __init__(self, *, factor: float = 1.0, accuracy_weight: float = 0.9) -> None:
            self.factor = factor
            self.accuracy_weight = accuracy_weight

        def __call__(self, x: RewardInput) -> RewardOutput:
            return RewardOutput(self.factor * self.accuracy_weight)

    @staticmethod
    @hookimpl
    def register_rewards(register: Any) -> None:
        register("scaled", Plugin.Scaled, aliases=["scaled reward"])


def test_from_registry_passes_common_and_own_options(videorl_plugins: Any) -> None:
    plugins = videorl_plugins(Plugin)
    config = load_rewards(
        {"accuracy_weight": 0.8, "format_weight": 0.2, "options": {"scaled": {"factor": 0.5}}}
    )
    router = RewardRouter.from_registry(plugins.rewards, config)
    out = router.score([inp("Scaled Reward")])[0]
    assert out is not None and out.score == pytest.approx(0.4)  # factor 0.5 × accuracy_weight 0.8
    bad = RewardRouter.from_registry(plugins.rewards, load_rewards({"options": {"scaled": {"factr": 2}}}))
    with pytest.raises(
        ConfigError, match=r"reward 'scaled' takes no option 'factr'\. Did you mean 'factor'\?"
    ):
        bad.validate([row("scaled")])
    with pytest.raises(ConfigError, match="rewards.options names reward 'nope'"):
        RewardRouter.from_registry(plugins.rewards, load_rewards({"options": {"nope": {}}}))


def test_reward_input_from_sample() -> None:
    sample = {
        "problem_id": 12,
        "problem": "Q?",
        "problem_type": "multiple choice",
        "options": ["A. x", "B. y"],
        "solution": "<answer>B</answer>",
        "video_metadata": {
            "source_fps": 30.0, "total_frames": 90, "duration": 3.0, "frame_indices": [0, 45],
            "timestamps": [0.0, 1.5], "source_width": 640, "source_height": 480, "width": 448, "height": 336,
        },
        "tests": ["assert True"],
    }  # fmt: skip
    x = RewardInput.from_sample(sample, "resp", model_family="qwen3_vl")
    assert (x.sample_id, x.ground_truth, x.options, x.model_family) == (
        "12",
        "<answer>B</answer>",
        ["A. x", "B. y"],
        "qwen3_vl",
    )
    assert x.media is not None
    assert (x.media.fps, x.media.num_frames, x.media.width, x.media.resized_width) == (30.0, 2, 640, 448)
    assert x.extra == {"tests": ["assert True"]}
    with pytest.raises(KeyError, match="ground_truth or answer or solution"):
        RewardInput.from_sample({"problem_type": "x"}, "r")
    with pytest.raises(ValueError, match="unknown media field"):
        RewardInput.from_sample({"problem_type": "x", "answer": 1, "media": {"fps": 1, "colour": 2}}, "r")


def test_without_a_timeout() -> None:
    router = RewardRouter.of({"echo": Echo()}, config=RewardConfig(timeout=None, threads=1))
    outs = router.score([inp("echo", str(i / 600), sample_id=str(i)) for i in range(600)])
    assert [o.score for o in outs if o] == [i / 600 for i in range(600)]  # order kept across chunks
    assert not router.event_counts


# --- plain functions, option typos, ground truths, canonical types ------------------------------------


def parity(x: RewardInput) -> float:
    """A plain reward function, as TRL's reward_funcs take: 1 when the response is an even number."""
    return 1.0 if x.response.strip().isdigit() and int(x.response) % 2 == 0 else 0.0


async def async_parity(x: RewardInput) -> RewardOutput:
    return RewardOutput(parity(x), {"even": parity(x)})


class Counted(TaskReward):
    """A TaskReward subclass with its own option and **common handed on to TaskReward."""

    name = "counted"
    truth_shape = "a whole number such as 3"
    truth_types = (str, int)

    def __init__(self, *, tolerance: int = 0, **common: Any) -> None:
        super().__init__(**common)
        self.tolerance = tolerance

    def parse_answer(self, text: Any, inp: RewardInput) -> int | None:
        return int(text) if str(text).strip().isdigit() else None

    def accuracy(self, answer: int, truth: int, inp: RewardInput) -> float:
        return 1.0 if abs(answer - truth) <= self.tolerance else 0.0


class FunctionPlugin:
    @staticmethod
    @hookimpl
    def register_rewards(register: Any) -> None:
        register("parity", parity, aliases=["even"])
        register("async_parity", async_parity)
        register("counted", Counted)


def test_a_plain_function_is_a_reward_not_a_factory(videorl_plugins: Any) -> None:
    plugins = videorl_plugins(FunctionPlugin)
    router = RewardRouter.from_registry(plugins.rewards)
    router.validate([row("even"), row("async_parity")])
    outs = router.score([inp("even", "4"), inp("even", "3"), inp("parity", "x"), inp("async_parity", "8")])
    assert [(o.score, o.parts) for o in outs if o] == [(1.0, {}), (0.0, {}), (0.0, {}), (1.0, {"even": 1.0})]
    assert not router.event_counts
    with pytest.raises(
        ConfigError, match="'parity' is a plain function of the RewardInput and takes no options"
    ):
        RewardRouter.from_registry(plugins.rewards, load_rewards({"options": {"parity": {"x": 1}}})).reward(
            "parity"
        )


def test_an_option_typo_gets_did_you_mean_also_through_kwargs(videorl_plugins: Any) -> None:
    plugins = videorl_plugins(FunctionPlugin)
    for typo, meant in (("tolerence", "tolerance"), ("acuracy_weight", "accuracy_weight")):
        router = RewardRouter.from_registry(
            plugins.rewards, load_rewards({"options": {"counted": {typo: 1}}})
        )
        with pytest.raises(
            ConfigError, match=rf"rewards\.options\.counted: .*no option '{typo}'\. Did you mean '{meant}'"
        ):
            router.validate([row("counted")])
    good = RewardRouter.from_registry(
        plugins.rewards, load_rewards({"options": {"counted": {"tolerance": 1}}})
    )
    out = good.score([RewardInput("<answer>4</answer>", "counted", "3")])[0]
    assert out is not None and out.score == pytest.approx(1.0)  # |4 - 3| <= 1


def test_a_ground_truth_of_the_wrong_shape_fails_validation(videorl_plugins: Any) -> None:
    router = RewardRouter.from_registry(videorl_plugins(FunctionPlugin).rewards)
    rows = [row("counted", "ok", 3), row("counted", "bad", {"count": 3})]
    router.validate(rows)  # the shape is checked only when asked (training asks)
    with pytest.raises(
        DataError,
        match=r"sample 'bad': the ground truth '\{\"count\": 3\}' \(an object\) is not a "
        r"valid counted answer; expected a whole number such as 3",
    ):
        router.validate(rows, ground_truths=True)
    router.validate(rows[:1], ground_truths=True)


def test_canonical_type_and_reward_names_follow_aliases_and_routes() -> None:
    config = load_rewards({"routes": {"Counting": "numerical", "mix": {"numerical": 0.5, "mc": 0.5}}})
    router = RewardRouter.of(
        {"multiple_choice": Const(1), "numerical": Const(1)},
        aliases={"mc": "multiple_choice", "multiple choice": "multiple_choice"},
        config=config,
    )
    spellings = ["Multiple Choice", "multiple-choice", "mc", "MC"]
    assert {router.canonical_type(t) for t in spellings} == {"multiple_choice"}
    assert router.canonical_type("counting ") == "counting"  # a routed type keeps its own (normalised) name
    assert router.reward_names("counting") == ["numerical"]
    assert router.reward_names("mix") == ["numerical", "multiple_choice"]
    assert router.describe_route("counting") == "routed to 'numerical' by rewards.routes"
    with pytest.raises(LookupError):
        router.reward_names("nope")


def test_an_unknown_problem_type_close_to_a_registered_one_gets_did_you_mean() -> None:
    router = RewardRouter.of({"multiple_choice": Const(1), "math": Const(1)})
    with pytest.raises(DataError) as err:
        router.validate([row("multiple_choise", "a")])
    assert (
        "problem_type 'multiple_choise' of sample 'a' has no reward. Did you mean 'multiple_choice'?"
        in str(err.value)
    )
    with pytest.raises(DataError) as err:
        router.validate([row("dancing", "b")])
    assert "Did you mean" not in str(err.value)
