"""A pytest plugin for plugin authors: fixtures and contract checks.

Opt in from a ``conftest.py`` with ``pytest_plugins = ["videorl.testing"]`` (or ``pytest -p
videorl.testing``). Fixtures:

- ``videorl_plugins(*plugins, entry_points=False, disable=(), strict=False)``: a fresh plugin set
  with the built-ins and the given plugin objects (modules, classes or instances with hookimpls),
  without the installed entry points unless asked;
- ``fake_entry_points({"dist-name": target})``: make the loader see these entry points instead of
  the installed ones (``target`` is a plugin object, a ``"module"`` string, or an exception to raise
  on load), to test loading, blocking and collisions without installing anything;
- ``run_cli(*args)``: run the ``videorl`` command line in-process and get a :class:`CliResult`.

:func:`write_test_video` writes a small clip for fixtures.

Contract checks, to call from a plugin's own tests: :func:`assert_reward_contract`,
:func:`assert_benchmark_contract`, :func:`assert_algorithm_contract`, :func:`assert_backend_contract`
(:mod:`videorl.testing.backend`), :func:`assert_engine_contract` (:mod:`videorl.testing.engine`),
:func:`assert_tool_contract` (:mod:`videorl.testing.tools`) and :func:`assert_workflow_contract`
(:mod:`videorl.testing.workflows`, with :class:`ScriptedEngine`, a rollout engine whose turns are
written in advance).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from videorl import cli
from videorl import plugins as plugins_module
from videorl.algorithms import (
    AdvantageEstimator,
    LossScale,
    PolicyLoss,
    PolicyLossFunction,
    StepAdvantageEstimator,
    StepRewards,
    advantages_of,
)
from videorl.benchmark import Benchmark, BenchmarkRow
from videorl.eval.scoring import aggregator
from videorl.plugins import Plugins, load_plugins
from videorl.rewards.types import RewardInput, RewardOutput
from videorl.testing.backend import assert_backend_contract
from videorl.testing.engine import assert_engine_contract
from videorl.testing.tools import assert_tool_contract
from videorl.testing.workflows import ScriptedEngine, assert_workflow_contract, tool_agent

__all__ = [
    "CliResult",
    "FakeEntryPoint",
    "ScriptedEngine",
    "assert_algorithm_contract",
    "assert_backend_contract",
    "assert_benchmark_contract",
    "assert_engine_contract",
    "assert_reward_contract",
    "assert_tool_contract",
    "assert_workflow_contract",
    "call_reward",
    "tool_agent",
    "write_test_video",
]


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture
def videorl_plugins(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Plugins]:
    """Factory of fresh plugin sets; ``VIDEORL_*`` variables are cleared for the test."""
    for var in (plugins_module.DISABLE_ENV, plugins_module.STRICT_ENV):
        monkeypatch.delenv(var, raising=False)

    def make(
        *extra: Any, entry_points: bool = False, disable: Sequence[str] = (), strict: bool = False
    ) -> Plugins:
        return load_plugins(extra=extra, entry_points=entry_points, disable=disable, strict=strict)

    return make


@dataclass
class FakeEntryPoint:
    """Stands in for an ``importlib.metadata.EntryPoint`` of group ``videorl``."""

    name: str
    target: Any
    version: str = "0.0.0"
    group: str = plugins_module.ENTRY_POINT_GROUP

    @property
    def value(self) -> str:
        return self.target if isinstance(self.target, str) else repr(self.target)

    @property
    def dist(self) -> SimpleNamespace:
        return SimpleNamespace(name=self.name, version=self.version)

    def load(self) -> Any:
        if isinstance(self.target, BaseException):
            raise self.target
        if isinstance(self.target, str):
            import importlib

            return importlib.import_module(self.target)
        return self.target


@pytest.fixture
def fake_entry_points(monkeypatch: pytest.MonkeyPatch) -> Callable[[Mapping[str, Any]], None]:
    """Replace the installed ``videorl`` entry points with the given ``{dist-name: target}``."""

    def install(eps: Mapping[str, Any] | Sequence[FakeEntryPoint]) -> None:
        items = [FakeEntryPoint(n, t) for n, t in eps.items()] if isinstance(eps, Mapping) else list(eps)
        monkeypatch.setattr(plugins_module, "_entry_points", lambda: items)

    return install


@dataclass
class CliResult:
    exit_code: int
    output: str
    stderr: str
    exception: BaseException | None

    def json(self) -> Any:
        return json.loads(self.output)

    def assert_success(self) -> CliResult:
        assert self.exit_code == 0, f"exit code {self.exit_code}\n{self.output}\n{self.stderr}"
        return self


@pytest.fixture
def run_cli(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., CliResult]]:
    """Run ``videorl ARGS...`` in-process (plugins are loaded as the real command would)."""
    from click.testing import CliRunner

    def run(*args: str, env: Mapping[str, str] | None = None) -> CliResult:
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        disabled, extra, strict = cli._global_flags(args)
        try:
            plugins = load_plugins(disable=disabled, extra=extra, strict=strict or None)
            root = cli.make_cli(plugins)
        except Exception as load_error:  # reported as `videorl` itself reports it
            return CliResult(2, "", f"Error: {load_error}\n", load_error)
        result = CliRunner().invoke(root, list(args), catch_exceptions=True)
        raised = result.exception if not isinstance(result.exception, SystemExit) else None
        return CliResult(result.exit_code, result.stdout, result.stderr, raised)

    yield run


def write_test_video(
    path: str | Path, *, frames: int = 8, height: int = 64, width: int = 96, fps: float = 4.0, seed: int = 0
) -> Path:
    """Write a small H.264 clip (a scrolling texture with a moving red square) for fixtures; returns it."""
    from videorl.media.synthetic import textured_frames, write_video

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_video(path, textured_frames(frames, height, width, seed=seed), fps=fps)


# --- contract checks ----------------------------------------------------------------------------


def call_reward(reward: Any, inp: RewardInput) -> RewardOutput | None:
    """Call a sync or async reward and return its output."""
    out = reward(inp)
    if inspect.isawaitable(out):
        out = asyncio.run(_await(out))
    return out


async def _await(awaitable: Any) -> Any:
    return await awaitable


def _check_output(out: Any, where: str) -> None:
    if out is None:
        return
    assert isinstance(out, RewardOutput), f"{where}: returned {type(out).__name__}, not RewardOutput"
    assert isinstance(out.score, (int, float)) and not math.isnan(out.score), f"{where}: score {out.score!r}"
    assert 0.0 <= out.score <= 1.0, f"{where}: score {out.score} outside [0, 1]"
    for key, value in out.parts.items():
        assert isinstance(key, str), f"{where}: part name {key!r} is not a string"
        assert isinstance(value, (int, float)) and not math.isnan(value), f"{where}: part {key}={value!r}"


def assert_reward_contract(
    reward: Any, cases: Sequence[tuple[RewardInput, float | None]], *, tol: float = 1e-6
) -> None:
    """Check a reward against hand-computed cases and the rules every reward must keep.

    ``cases`` pairs inputs with the expected score (``None``: the reward abstains). Beyond them, the
    reward must be deterministic and must score an empty, a garbage and a 1 MB response in [0, 1]
    (or abstain) without raising.
    """
    assert cases, "give at least one hand-computed case"
    for i, (inp, expected) in enumerate(cases):
        where = f"case {i} ({inp.problem_type}, response {inp.response[:40]!r})"
        out = call_reward(reward, inp)
        _check_output(out, where)
        again = call_reward(reward, inp)
        assert (out is None) == (again is None) and (
            out is None or again is None or out.score == again.score
        ), f"{where}: not deterministic ({out} then {again})"
        if expected is None:
            assert out is None, f"{where}: expected to abstain, got {out}"
        else:
            assert out is not None, f"{where}: abstained, expected {expected}"
            assert abs(out.score - expected) <= tol, f"{where}: score {out.score}, expected {expected}"
    base = cases[0][0]
    for label, text in [("empty", ""), ("garbage", "\x00<answer><answer>}{"), ("1 MB", "A" * 1_000_000)]:
        inp = RewardInput(**{**base.__dict__, "response": text})
        _check_output(call_reward(reward, inp), f"{label} response")


def _check_row_media(row: BenchmarkRow, root: Path, name: str, require_media: bool) -> None:
    """A row's video and image are absolute paths under the data root (the evaluator opens them as
    given, from whatever directory it runs in); with ``require_media`` the files exist."""
    for kind in ("video", "image"):
        media = getattr(row, kind)
        if media is None:
            continue
        where = f"{name}: row {row.id!r}: {kind} {media!r}"
        assert isinstance(media, str) and media, f"{where} is not a path string"
        path = Path(media)
        assert path.is_absolute(), f"{where} is relative; load() must resolve it against the data root"
        assert path.resolve().is_relative_to(root), f"{where} is not under the data root {root}"
        assert not require_media or path.exists(), (
            f"{where} does not exist: put the file in the fixture (videorl.testing.write_test_video)"
        )


def _check_row_scoring_fields(row: BenchmarkRow, name: str) -> None:
    """What scoring and the rewards read: a problem type, a ground truth, and for multiple choice
    the option texts with the answer as the letter of one of them."""
    where = f"{name}: row {row.id!r}"
    assert isinstance(row.problem_type, str) and row.problem_type.strip(), (
        f"{where}: problem_type {row.problem_type!r}"
    )
    assert isinstance(row.problem, str) and row.problem.strip(), f"{where}: empty problem"
    assert row.answer is not None, f"{where}: no answer (ground truth)"
    if row.problem_type == "multiple_choice":
        options = row.options or []
        assert len(options) >= 2 and all(isinstance(o, str) and o.strip() for o in options), (
            f"{where}: a multiple_choice row needs at least two option texts, got {row.options!r}"
        )
        letters = [chr(65 + i) for i in range(len(options))]
        assert row.answer in letters, (
            f"{where}: answer {row.answer!r} is not one of the option letters {letters}"
        )


def assert_benchmark_contract(
    benchmark: Benchmark,
    data_root: Path,
    *,
    responses: Mapping[str, str] | None = None,
    expected: Mapping[str, Any] | None = None,
    require_media: bool = False,
) -> list[BenchmarkRow]:
    """Check an adapter on a fixture directory in the benchmark's official format.

    Rows must load with unique ids; every video and image must be an absolute path under
    ``data_root`` (with ``require_media``, an existing file); every row needs a ``problem_type``, a
    problem and an answer, and a ``multiple_choice`` row at least two options with the answer one of
    their letters. Prompts must be non-empty with and without thinking, for the
    official prompt and for the Qwen families; extraction must survive an empty, a garbage and a 1 MB
    response and give JSON-serialisable predictions; an empty response scores 0 and a prediction equal
    to the ground truth scores 1; scores must lie in [0, 1] and be deterministic; the aggregate must carry
    ``overall`` and ``categories`` and give 1 when every row scores 1 and 0 when none does (given no
    predictions, for an adapter that aggregates them). With
    ``responses`` (row id -> response text; missing ids answer "") and ``expected`` (the hand-computed
    aggregate, or part of it: nested dicts compare key by key, numbers approximately), the aggregate of
    the responses' scores must equal it. Returns the rows.
    """

    def check(got: Any, want: Any, where: str) -> None:
        if isinstance(want, Mapping):
            assert isinstance(got, Mapping), f"{where}: {got!r}, expected a mapping {want!r}"
            for key, value in want.items():
                assert key in got, f"{where}: missing {key!r} (has {sorted(got)})"
                check(got[key], value, f"{where}.{key}")
        elif isinstance(want, (int, float)) and not isinstance(want, bool):
            assert got == pytest.approx(want), f"{where} = {got}, expected {want}"
        else:
            assert got == want, f"{where} = {got!r}, expected {want!r}"

    name = benchmark.name
    assert isinstance(name, str) and name, f"benchmark name {name!r}"
    rows = benchmark.load(Path(data_root))
    assert rows, f"{name}: no rows loaded from {data_root}"
    ids = [r.id for r in rows]
    assert len(set(ids)) == len(ids), f"{name}: duplicate row ids"
    unknown = set(responses or {}) - set(ids)
    assert not unknown, f"{name}: responses for ids that did not load: {sorted(unknown)}"
    root = Path(data_root).resolve()
    scores = []
    predictions: dict[str, Any] = {}
    for row in rows:
        _check_row_media(row, root, name, require_media)
        _check_row_scoring_fields(row, name)
        for family in (None, "qwen3_vl", "qwen2_5_vl"):
            for thinking in (False, True):
                prompt = benchmark.build_prompt(row, family=family, thinking=thinking)
                assert isinstance(prompt, str) and prompt.strip(), (
                    f"{row.id}: empty prompt ({family}, {thinking})"
                )
        assert benchmark.score(row, benchmark.extract(row, "")) == 0.0, f"{row.id}: empty answer scored"
        assert benchmark.score(row, row.answer) == pytest.approx(1.0), (
            f"{row.id}: the ground truth does not score 1"
        )
        response = (responses or {}).get(row.id, "")
        prediction = predictions[row.id] = benchmark.extract(row, response)
        json.dumps(prediction)  # predictions are saved as JSON
        score = benchmark.score(row, prediction)
        assert 0.0 <= score <= 1.0, f"{row.id}: score {score} outside [0, 1]"
        assert benchmark.score(row, benchmark.extract(row, response)) == score, f"{row.id}: not deterministic"
        scores.append(score)
    for label, text in [("garbage", "\x00<answer><answer>}{ [1, 2] ((A"), ("1 MB", "A B 1 " * 170_000)]:
        score = benchmark.score(rows[0], benchmark.extract(rows[0], text))
        assert 0.0 <= score <= 1.0, f"{rows[0].id}: {label} response scored {score}"
    for value in (0.0, 1.0):
        overall = benchmark.aggregate(rows, [value] * len(rows))["overall"]
        assert overall == pytest.approx(value), f"{name}: every row scoring {value} gives overall {overall}"
    summary = aggregator(benchmark, predictions)(rows, scores)  # with the predictions, where it reads them
    assert "overall" in summary and "categories" in summary, f"{name}: aggregate {summary}"
    assert 0.0 <= summary["overall"] <= 1.0
    json.dumps(summary)
    check(summary, dict(expected or {}), name)
    return rows


def assert_algorithm_contract(component_class: type, **options: Any) -> Any:
    """Check an advantage estimator or a policy loss (a class registered by
    ``register_advantage_estimators`` / ``register_policy_losses``) on small random tensors.

    - it is a dataclass whose every field (option) has a default and a ``help`` text in its metadata,
      and it is made from its defaults (or ``options``);
    - an estimator (``advantages(rewards)``, or ``estimate(step)`` on a :class:`~videorl.api.StepRewards`)
      maps ``(groups, n)`` rewards to finite advantages of the same shape, the same on a second call,
      without changing its input;
    - a loss's ``loss`` returns a :class:`~videorl.api.PolicyLoss` with a finite scalar loss, the same for
      per-sequence ``(B,)`` and per-token ``(B, T)`` advantages (rollout correction passes the latter),
      linear in the advantages (twice the advantages, twice the loss: the correction's weights rely on it),
      finite gradients that are 0 at padding, and inputs left unchanged.

    Returns the instance.
    """
    import dataclasses

    import torch

    name = component_class.__name__
    assert dataclasses.is_dataclass(component_class), (
        f"{name}: must be a dataclass (its fields are its options)"
    )
    for f in dataclasses.fields(component_class):
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        assert has_default, f"{name}: option {f.name!r} has no default"
        assert f.metadata.get("help"), (
            f"{name}: option {f.name!r} has no help text (metadata={{'help': ...}})"
        )
    component: Any = component_class(**options)
    is_estimator = isinstance(component, AdvantageEstimator | StepAdvantageEstimator)
    is_loss = isinstance(component, PolicyLossFunction)
    assert is_estimator or is_loss, f"{name}: has neither advantages(rewards), estimate(step) nor loss(...)"
    generator = torch.Generator().manual_seed(0)
    if is_estimator:
        rewards = torch.rand(3, 4, generator=generator)
        rewards[1] = 0.5  # a group of equal rewards
        before = rewards.clone()
        lengths = torch.randint(1, 9, (3, 4), generator=generator)
        parts = tuple(tuple({"accuracy": float(r), "format": 1.0} for r in row) for row in rewards.tolist())
        step = StepRewards(rewards, lengths, parts)
        out = advantages_of(component, step)
        assert isinstance(out, torch.Tensor) and out.shape == rewards.shape, f"{name}: advantages shape"
        assert torch.isfinite(out).all(), f"{name}: advantages are not finite: {out}"
        assert torch.equal(rewards, before), f"{name}: advantages changed its input"
        assert torch.equal(advantages_of(component, step), out), f"{name}: advantages are not deterministic"
    if is_loss:
        base = torch.log(torch.rand(3, 4, generator=generator) * 0.8 + 0.1)
        old = base + 0.1 * torch.randn(3, 4, generator=generator)
        mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
        advantages = torch.tensor([1.0, -0.5, 0.25])
        scale = LossScale(tokens=7.0, responses=3.0, max_response_length=4)
        results = []
        for adv in (advantages, advantages.unsqueeze(-1).expand(3, 4).clone(), 2 * advantages):
            log_probs = base.clone().requires_grad_(True)
            old_before, adv_before = old.clone(), adv.clone()
            out = component.loss(log_probs, old, adv, mask, scale)
            assert isinstance(out, PolicyLoss), f"{name}: loss must return a videorl.api.PolicyLoss"
            assert out.loss.dim() == 0 and torch.isfinite(out.loss), (
                f"{name}: the loss is not a finite scalar"
            )
            out.loss.backward()
            grad = log_probs.grad
            assert grad is not None and torch.isfinite(grad).all(), f"{name}: gradients are not finite"
            assert bool((grad[~mask] == 0).all()), f"{name}: padding tokens get a gradient"
            assert torch.equal(old, old_before) and torch.equal(adv, adv_before), (
                f"{name}: changed its inputs"
            )
            results.append(float(out.loss.detach()))
        per_sequence, per_token, doubled = results
        assert math.isclose(per_sequence, per_token, rel_tol=1e-5, abs_tol=1e-7), (
            f"{name}: per-token advantages give {per_token}, per-sequence ones {per_sequence}"
        )
        assert math.isclose(doubled, 2 * per_sequence, rel_tol=1e-4, abs_tol=1e-7), (
            f"{name}: the loss is not linear in the advantages ({doubled} for twice, {per_sequence} for once)"
        )
    return component
