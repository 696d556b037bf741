"""``RewardRouter``: routes each response to the rewards of its ``problem_type`` and scores it safely.

Safety: a reward that raises, runs past ``timeout`` or returns something other than ``None`` or a
``RewardOutput`` with a score in [0, 1] gives that sample a score of 0 with ``RewardOutput.error`` set,
and a :class:`RewardEvent` that is counted (``event_counts``), kept (the last 1,000, ``events``) and
logged on the ``videorl.rewards`` logger with the sample id. Scoring never raises because of a reward.

A synchronous reward runs in a daemon thread (:class:`videorl.workers.DeadlineThreads`, which keeps the
time limits); Python cannot kill a thread, so a reward stuck in a loop keeps its thread (another one
takes its place). The router itself only routes, checks and combines. Rewards that may hang on model
output (math, code) bound themselves with subprocesses they can kill.
"""

from __future__ import annotations

import asyncio
import difflib
import inspect
import logging
import math
import re
import threading
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from videorl.data.sample import Sample
from videorl.errors import ConfigError, DataError
from videorl.registry import Registry, normalize_name
from videorl.rewards.config import RewardConfig, Route
from videorl.rewards.types import RewardInput, RewardOutput
from videorl.workers import DeadlineThreads

logger = logging.getLogger("videorl.rewards")

__all__ = ["RewardEvent", "RewardRouter"]

#: the common options a reward's summary shows (``videorl reward``)
_SHOWN_OPTIONS = ("accuracy_weight", "format_weight", "fallback")


@dataclass(frozen=True)
class RewardEvent:
    """A sample that scored 0 because its reward failed: ``kind`` is ``error``, ``timeout``,
    ``invalid_output`` or ``unknown_type``."""

    sample_id: str
    problem_type: str
    reward: str
    kind: str
    message: str


def _is_async(reward: Any) -> bool:
    method = inspect.getattr_static(type(reward), "__call__", None)
    return inspect.iscoroutinefunction(reward) or inspect.iscoroutinefunction(method)


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 500 else text[:497] + "..."


class RewardRouter:
    """Maps ``problem_type`` to rewards and scores batches of :class:`RewardInput`.

    Build it with :meth:`from_registry` (the CLI and the trainer) or :meth:`of` (plain reward objects,
    e.g. in tests). Call :meth:`validate` on the dataset before any rollout, then :meth:`score` (or
    ``await`` :meth:`ascore`) on each batch.
    """

    def __init__(
        self,
        factories: Mapping[str, Callable[[], Any]],
        *,
        aliases: Mapping[str, str] | None = None,
        config: RewardConfig | None = None,
    ) -> None:
        """``factories``: reward name → zero-argument factory of the reward; ``aliases``: further
        ``problem_type`` spellings → reward name (names route to themselves)."""
        self.config = config or RewardConfig()
        self._factories = dict(factories)
        self._keys: dict[str, str] = {normalize_name(n): n for n in self._factories}
        for alias, name in (aliases or {}).items():
            if name not in self._factories:
                raise ConfigError(f"alias {alias!r} routes to reward {name!r}, which is not given")
            self._keys[normalize_name(alias)] = name
        self._routes: dict[str, list[Route]] = {}
        for problem_type, targets in self.config.routes.items():
            self._routes[problem_type] = [
                (self._resolve(n, f"rewards.routes.{problem_type}"), w) for n, w in targets
            ]
        for name in self.config.options:
            self._resolve(name, "rewards.options")
        self._instances: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._threads = DeadlineThreads(self.config.threads)
        self.event_counts: Counter[str] = Counter()
        self.events: deque[RewardEvent] = deque(maxlen=1000)

    # --- construction ----------------------------------------------------------------------------

    @classmethod
    def of(
        cls,
        rewards: Mapping[str, Any],
        *,
        aliases: Mapping[str, str] | None = None,
        config: RewardConfig | None = None,
    ) -> RewardRouter:
        """A router over ready reward objects (``name → reward``)."""

        def constant(reward: Any) -> Callable[[], Any]:
            return lambda: reward

        return cls({name: constant(r) for name, r in rewards.items()}, aliases=aliases, config=config)

    @classmethod
    def from_registry(cls, registry: Registry[Any], config: RewardConfig | None = None) -> RewardRouter:
        """A router over every registered reward; each is created on first use with its options."""
        config = config or RewardConfig()
        aliases = {alias: entry.name for entry in registry.entries() for alias in entry.aliases}

        def factory(name: str) -> Callable[[], Any]:
            return lambda: _create(registry.get(name), name, config)

        return cls({name: factory(name) for name in registry.names()}, aliases=aliases, config=config)

    def _resolve(self, name: str, where: str) -> str:
        key = normalize_name(name)
        if key not in self._keys:
            raise ConfigError(
                f"{where} names reward {name!r}, which is not registered. {self._registered_text()}"
            )
        return self._keys[key]

    def _registered_text(self) -> str:
        by_name: dict[str, list[str]] = {n: [] for n in self._factories}
        for key, name in self._keys.items():
            if key != normalize_name(name):
                by_name[name].append(key)
        listed = [n + (f" (also {', '.join(sorted(a))})" if a else "") for n, a in sorted(by_name.items())]
        extra = sorted(k for k in self._routes if k not in self._keys)
        text = "Registered problem types: " + ("; ".join(listed) or "(none)")
        return text + (f"; routed in the config: {', '.join(extra)}." if extra else ".")

    # --- routing and validation ------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """The reward names this router knows."""
        return sorted(self._factories)

    def route(self, problem_type: str) -> list[Route] | None:
        """The ``(reward name, weight)`` pairs that score ``problem_type``; ``None`` when none does."""
        key = normalize_name(problem_type)
        if key in self._routes:
            return self._routes[key]
        if key in self._keys:
            return [(self._keys[key], 1.0)]
        return None

    def reward_names(self, problem_type: str) -> list[str]:
        """The names of the rewards that score ``problem_type`` (its route's, in order); ``LookupError``
        when none does. Prompt templates are looked up under these names after the type itself."""
        routes = self.route(problem_type)
        if routes is None:
            raise LookupError(f"no reward for problem_type {problem_type!r}")
        return [name for name, _ in routes]

    def canonical_type(self, problem_type: str) -> str:
        """The one spelling of ``problem_type`` in metrics: the ``rewards.routes`` key it matches
        (normalised), else the name of the reward it names or aliases, else its normalised form."""
        key = normalize_name(problem_type)
        if key in self._routes:
            return key
        return self._keys.get(key, key)

    def describe_route(self, problem_type: str) -> str:
        """How ``problem_type`` is routed, for messages."""
        routes = self.route(problem_type)
        if routes is None:
            return "routed to no reward"
        names = ", ".join(repr(name) for name, _ in routes)
        if normalize_name(problem_type) in self._routes:
            return f"routed to {names} by rewards.routes"
        return f"scored by reward {names}"

    def reward(self, name: str) -> Any:
        """The reward object registered as ``name`` (created on first use)."""
        with self._lock:
            if name not in self._instances:
                self._instances[name] = self._factories[name]()
            return self._instances[name]

    def settings(self, name: str) -> dict[str, Any]:
        """What reward ``name`` scores with of the common options ``accuracy_weight``, ``format_weight``
        and ``fallback``: its own defaults unless the config sets them (those it keeps as attributes, as
        every ``TaskReward`` does; none for other rewards)."""
        reward = self.reward(name)
        return {key: getattr(reward, key) for key in _SHOWN_OPTIONS if hasattr(reward, key)}

    def validate(self, samples: Sequence[Sample], *, ground_truths: bool = False) -> None:
        """Check, before any rollout, that every sample's ``problem_type`` has a reward, and create
        those rewards (a bad reward option fails here).

        ``samples`` are the loaded dataset rows (:func:`videorl.data.loaders.parse_row`). Raises
        ``DataError`` naming the problem type, a sample that has it (and where it was read) and the
        registered types. With ``ground_truths``, every sample's ground truth is also checked by each
        of its rewards that can (``check_ground_truth(inp)``, e.g. every :class:`TaskReward`): one of
        the wrong shape is a ``DataError`` naming the sample and the shape expected.
        """
        unknown: dict[str, list[str]] = {}
        needed: set[str] = set()
        for index, sample in enumerate(samples):
            problem_type = sample.problem_type
            sample_id = repr(sample.id or f"#{index}") + (f" ({sample.origin})" if sample.origin else "")
            if not problem_type.strip():
                raise DataError(f"sample {sample_id} has no problem_type. {self._registered_text()}")
            routes = self.route(problem_type)
            if routes is None:
                unknown.setdefault(problem_type, []).append(sample_id)
            else:
                needed.update(name for name, _ in routes)
        if unknown:
            problem_type, ids = next(iter(unknown.items()))
            more = f" and {len(ids) - 1} more sample(s)" if len(ids) > 1 else ""
            others = (
                f" Other unknown problem types: {', '.join(map(repr, list(unknown)[1:]))}."
                if len(unknown) > 1
                else ""
            )
            known = sorted({*self._keys, *self._routes})
            close = difflib.get_close_matches(normalize_name(problem_type), known, n=1, cutoff=0.6)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise DataError(
                f"problem_type {problem_type!r} of sample {ids[0]}{more} has no reward.{hint} "
                f"{self._registered_text()}{others} Fix the sample, route the type in rewards.routes, or "
                "install a reward plugin that registers it."
            )
        for name in sorted(needed):
            self.reward(name)
        if ground_truths:
            for sample in samples:
                self._check_ground_truth(sample)

    def check_config(self) -> None:
        """Create every reward that ``rewards.routes`` or ``rewards.options`` names, so that a bad option
        fails without a dataset (``videorl train --print-config``)."""
        names = {name for routes in self._routes.values() for name, _ in routes}
        names |= {self._resolve(n, "rewards.options") for n in self.config.options}
        for name in sorted(names):
            self.reward(name)

    def _check_ground_truth(self, sample: Sample) -> None:
        inp = RewardInput.from_sample(sample, "")  # the input of a response, with an empty response
        for name in self.reward_names(inp.problem_type):
            check = getattr(self.reward(name), "check_ground_truth", None)
            if callable(check):
                check(inp)

    # --- scoring ---------------------------------------------------------------------------------

    def score(self, inputs: Sequence[RewardInput]) -> list[RewardOutput | None]:
        """Score a batch (``None``: every reward of that input abstained). Use :meth:`ascore` inside an
        event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.ascore(inputs))
        raise RuntimeError(
            "RewardRouter.score was called inside a running event loop; await ascore() instead"
        )

    async def ascore(self, inputs: Sequence[RewardInput]) -> list[RewardOutput | None]:
        """Score a batch concurrently: batch rewards once per batch, others once per input."""
        jobs: dict[str, list[int]] = {}
        routes: list[list[Route] | None] = []
        for i, inp in enumerate(inputs):
            found = self.route(inp.problem_type)
            routes.append(found)
            for name, _ in found or []:
                jobs.setdefault(name, []).append(i)
        semaphore = asyncio.Semaphore(self.config.threads)
        names = list(jobs)
        outcomes = await asyncio.gather(
            *(self._run(name, [inputs[i] for i in jobs[name]], semaphore) for name in names)
        )
        by_name = {
            name: dict(zip(jobs[name], outs, strict=True)) for name, outs in zip(names, outcomes, strict=True)
        }
        results: list[RewardOutput | None] = []
        for i, (inp, found) in enumerate(zip(inputs, routes, strict=True)):
            if found is None:
                results.append(
                    self._fail(inp, "-", "unknown_type", f"no reward for problem_type {inp.problem_type!r}")
                )
            else:
                results.append(_combine([(name, w, by_name[name][i]) for name, w in found]))
        return results

    async def _run(
        self, name: str, items: list[RewardInput], semaphore: asyncio.Semaphore
    ) -> list[RewardOutput | None]:
        reward = self.reward(name)
        timeout = self.config.timeout
        if callable(getattr(reward, "score_batch", None)):
            budget = None if timeout is None else timeout * len(items)
            try:
                async with semaphore:
                    outs = await self._threads.call(reward.score_batch, list(items), budget)
                if not isinstance(outs, Sequence) or len(outs) != len(items):
                    got = len(outs) if isinstance(outs, Sequence) else type(outs).__name__
                    raise TypeError(f"score_batch returned {got} results for {len(items)} inputs")
            except Exception as exc:
                kind = "timeout" if isinstance(exc, TimeoutError) else "error"
                message = (
                    f"batch of {len(items)} timed out after {budget} s"
                    if kind == "timeout"
                    else _describe(exc)
                )
                return [self._fail(inp, name, kind, message) for inp in items]
            return [self._check(out, inp, name) for out, inp in zip(outs, items, strict=True)]
        if _is_async(reward):

            async def one(inp: RewardInput) -> RewardOutput | None:
                try:
                    async with semaphore:
                        out = await asyncio.wait_for(reward(inp), timeout)
                except TimeoutError:
                    return self._fail(inp, name, "timeout", f"no result after {timeout} s")
                except Exception as exc:
                    return self._fail(inp, name, "error", _describe(exc))
                return self._check(out, inp, name)

            return list(await asyncio.gather(*(one(inp) for inp in items)))
        size = max(1, min(256, -(-len(items) // self.config.threads)))
        chunks = [items[i : i + size] for i in range(0, len(items), size)]
        done = await asyncio.gather(*(self._run_chunk(reward, chunk, semaphore) for chunk in chunks))
        results: list[RewardOutput | None] = []
        for chunk, outcomes in zip(chunks, done, strict=True):
            for inp, (status, value) in zip(chunk, outcomes, strict=True):
                if status == "ok":
                    results.append(self._check(value, inp, name))
                elif status == "timeout":
                    results.append(self._fail(inp, name, "timeout", f"no result after {timeout} s"))
                else:
                    results.append(self._fail(inp, name, "error", _describe(value)))
        return results

    async def _run_chunk(
        self, reward: Any, items: list[RewardInput], semaphore: asyncio.Semaphore
    ) -> list[tuple[str, Any]]:
        """Run a synchronous reward over ``items`` in one thread, item by item, each within the timeout."""
        async with semaphore:
            return await self._threads.run_each(reward, items, self.config.timeout)

    def _check(self, out: Any, inp: RewardInput, name: str) -> RewardOutput | None:
        if out is None:
            return None
        if not isinstance(out, RewardOutput):
            return self._fail(
                inp, name, "invalid_output", f"returned {type(out).__name__}, not RewardOutput or None"
            )
        score = out.score
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0.0 <= score <= 1.0:
            return self._fail(inp, name, "invalid_output", f"score {score!r} outside [0, 1]")
        bad = [
            k
            for k, v in out.parts.items()
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
        ]
        if bad:
            return self._fail(
                inp, name, "invalid_output", f"part(s) {', '.join(map(str, bad))} not finite numbers"
            )
        return out

    def _fail(self, inp: RewardInput, name: str, kind: str, message: str) -> RewardOutput:
        self.event_counts[kind] += 1
        self.events.append(RewardEvent(inp.sample_id, inp.problem_type, name, kind, message))
        logger.warning(
            "reward %r scored 0 on sample %r (%s): %s: %s",
            name,
            inp.sample_id,
            inp.problem_type,
            kind,
            message,
        )
        return RewardOutput(0.0, {}, error=f"{kind}: {message}")


def _combine(outs: list[tuple[str, float, RewardOutput | None]]) -> RewardOutput | None:
    """Σ weight·score over the rewards that did not abstain; ``None`` when all abstained."""
    given = [(name, w, out) for name, w, out in outs if out is not None]
    if not given:
        return None
    errors = [out.error for _, _, out in given if out.error]
    error = "; ".join(errors) if errors else None
    if len(outs) == 1:
        _, w, out = given[0]
        return out if w == 1.0 else RewardOutput(w * out.score, dict(out.parts), out.error)
    parts: dict[str, float] = {}
    for name, _, out in given:
        parts[name] = out.score
        parts.update({f"{name}/{k}": v for k, v in out.parts.items()})
    return RewardOutput(sum(w * out.score for _, w, out in given), parts, error)


def _signature(target: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(target)
    except (TypeError, ValueError):
        return None


def is_reward_function(target: Any) -> bool:
    """Whether a registered target is the reward itself (a function or object called with one
    :class:`RewardInput`) rather than a factory (a class, or a function of keyword options)."""
    if isinstance(target, type):
        return False
    signature = _signature(target)
    if signature is None:
        return False
    positional = [
        p for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]  # fmt: skip
    return len(positional) == 1


class FunctionReward:
    """A plain reward function ``(RewardInput) -> float | RewardOutput | None`` as a reward: a number
    becomes ``RewardOutput(score)``; anything else is left to the router's checks."""

    def __init__(self, function: Callable[[RewardInput], Any]) -> None:
        self.function = function

    def __repr__(self) -> str:
        return f"FunctionReward({getattr(self.function, '__qualname__', self.function)!r})"

    def __call__(self, inp: RewardInput) -> Any:
        return _as_output(self.function(inp))


class AsyncFunctionReward(FunctionReward):
    """:class:`FunctionReward` of an ``async def`` function."""

    async def __call__(self, inp: RewardInput) -> Any:
        return _as_output(await self.function(inp))


def _as_output(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return RewardOutput(float(value))
    return value


def _known_options(factory: Any) -> tuple[set[str], bool]:
    """The keyword options ``factory`` takes (for a class, also those its base classes' ``__init__``
    take, where ``**kwargs`` hands them on), and whether it takes any further ones."""
    names: set[str] = set()
    if isinstance(factory, type):
        chain = [vars(c)["__init__"] for c in factory.__mro__ if c is not object and "__init__" in vars(c)]
    else:
        chain = [factory]
    for function in chain:
        signature = _signature(function)
        if signature is None:
            return names, True
        params = list(signature.parameters.values())
        names |= {
            p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"
        }
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return names, False
    return names, bool(chain)  # a class without an __init__ of its own takes no options


def _option_error(name: str, key: str, known: set[str]) -> ConfigError:
    import difflib

    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    listed = ", ".join(sorted(known)) or "none"
    return ConfigError(
        f"rewards.options.{name}: reward {name!r} takes no option {key!r}.{hint} Its options: {listed}."
    )


def _create(factory: Callable[..., Any], name: str, config: RewardConfig) -> Any:
    """The reward ``factory`` makes with the common options it accepts and its own options from the
    config; a registered reward function is wrapped instead (it takes no options)."""
    own = next((dict(v) for k, v in config.options.items() if normalize_name(k) == normalize_name(name)), {})
    if is_reward_function(factory):
        if own:
            raise ConfigError(
                f"rewards.options.{name}: reward {name!r} is a plain function of the RewardInput and takes "
                f"no options (given: {', '.join(sorted(own))}); register a factory or class to take options"
            )
        if not (inspect.isfunction(factory) or inspect.ismethod(factory)):
            return factory  # a reward object registered ready-made
        wrapper = AsyncFunctionReward if inspect.iscoroutinefunction(factory) else FunctionReward
        return wrapper(factory)
    known, open_ended = _known_options(factory)
    for key in own:
        if key not in known and not open_ended:
            raise _option_error(name, key, known)
    common = config.common_options()
    if not open_ended:
        common = {k: v for k, v in common.items() if k in known}
    try:
        return factory(**{**common, **own})
    except TypeError as exc:
        match = re.search(r"unexpected keyword argument '([^']+)'", str(exc))
        if match and match.group(1) in own:
            raise _option_error(name, match.group(1), known) from exc
        raise ConfigError(f"reward {name!r} could not be created with options {sorted(own)}: {exc}") from exc
