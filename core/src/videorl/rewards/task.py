"""``TaskReward``: the base of rewards scored as ``accuracy_weight·accuracy + format_weight·format``."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from videorl.answers import answer_candidates, extract_tag, normalize_tags, strip_math_delimiters
from videorl.errors import ConfigError, DataError
from videorl.rewards.format import FormatRule
from videorl.rewards.types import RewardInput, RewardOutput

_JSON_KINDS = {str: "a string", dict: "an object", list: "a list", int: "a number", float: "a number",
               bool: "a boolean", type(None): "null"}  # fmt: skip
#: the keyword options every ``TaskReward`` accepts; the router passes them from the ``rewards`` config
COMMON_OPTIONS = ("accuracy_weight", "format_weight", "format_rule", "fallback")


class TaskReward:
    """A reward for one task type: extraction, the format rule and the weighting are done here.

    A subclass defines :meth:`parse_answer` (the typed answer in a text, ``None`` when the text does not
    fit the type) and :meth:`accuracy`, and may override :meth:`parse_truth`. Scoring one response:

    1. the answer is the content of the last ``<answer>…</answer>``;
    2. without a tag and with ``fallback`` (default), it is the first of the final statement ("the
       final answer is X"), the last ``\\boxed{}``, and the text after the reasoning that parses;
    3. ``format`` = 0 without a well-formed tag (see :class:`FormatRule`), 0.5 when the tagged content
       does not parse for the type, 1 otherwise;
    4. ``accuracy`` = :meth:`accuracy` of the parsed answer, 0 when nothing parses;
    5. score = ``accuracy_weight·accuracy + format_weight·format`` (0.9 and 0.1 by default; the weights
       must be non-negative and sum to 1, so the score stays in [0, 1]).
    """

    #: the problem type this reward scores (for messages)
    name = "task"
    #: what a valid ground truth looks like, for the message about one that is not (e.g. ``"a whole
    #: number such as 3"``)
    truth_shape = "a ground truth that this reward's parse_answer reads, as an answer would be written"
    #: the JSON types a ground truth may have (e.g. ``(str,)``: an object or a list is refused before
    #: ``parse_answer`` sees it); any by default
    truth_types: tuple[type, ...] = (object,)

    def __init__(
        self,
        *,
        accuracy_weight: float = 0.9,
        format_weight: float = 0.1,
        format_rule: FormatRule | Mapping[str, Any] | None = None,
        fallback: bool = True,
    ) -> None:
        for label, weight in (("accuracy_weight", accuracy_weight), ("format_weight", format_weight)):
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight >= 0:
                raise ConfigError(f"{self.name}: {label} must be a non-negative number, got {weight!r}")
        if not math.isclose(accuracy_weight + format_weight, 1.0, abs_tol=1e-9):
            raise ConfigError(
                f"{self.name}: accuracy_weight + format_weight must be 1 (got {accuracy_weight} + "
                f"{format_weight}), so that scores stay in [0, 1]"
            )
        self.accuracy_weight = float(accuracy_weight)
        self.format_weight = float(format_weight)
        self.format_rule = FormatRule.from_value(format_rule)
        self.fallback = bool(fallback)

    # --- what a subclass defines -------------------------------------------------------------------

    def parse_answer(self, text: str, inp: RewardInput) -> Any:
        """The typed answer in ``text``, or ``None`` when ``text`` does not fit the type."""
        return text.strip() or None

    def parse_truth(self, inp: RewardInput) -> Any:
        """The typed ground truth. By default the answer parsed from the ground truth text
        (``<answer>`` wrapper and ``$…$`` removed); an unusable one raises ``DataError`` naming the sample."""
        truth = inp.ground_truth
        allowed = isinstance(truth, self.truth_types)  # a bool, so that mypy keeps truth's type
        if not allowed:
            parsed = None
        elif isinstance(truth, str):
            tagged = extract_tag(truth)
            truth = strip_math_delimiters(tagged if tagged is not None else truth)
            parsed = self.parse_answer(truth, inp)
        else:
            parsed = self.parse_answer(truth, inp) if truth is not None else None
        if parsed is None:
            given = inp.ground_truth
            kind = _JSON_KINDS.get(type(given), type(given).__name__)
            text = given if isinstance(given, str) else json.dumps(given, default=str)
            raise DataError(
                f"sample {inp.sample_id!r}: the ground truth {text[:200]!r} ({kind}) is not a valid "
                f"{self.name} "
                f"answer; expected {self.truth_shape}"
            )
        return parsed

    def check_ground_truth(self, inp: RewardInput) -> None:
        """Raise ``DataError`` when ``inp.ground_truth`` does not parse (the router calls this for every
        row when the dataset loads, so a wrong shape fails before training, not as a reward of 0)."""
        self.parse_truth(inp)

    def accuracy(self, answer: Any, truth: Any, inp: RewardInput) -> float | dict[str, float] | None:
        """Accuracy in [0, 1] of a parsed answer, or a dict with ``"accuracy"`` and further parts, or
        ``None`` to abstain."""
        raise NotImplementedError

    # --- scoring -----------------------------------------------------------------------------------

    def extract(self, inp: RewardInput) -> tuple[Any, float]:
        """The parsed answer (``None`` if none) and the format score of ``inp.response``."""
        text = normalize_tags(inp.response)
        tagged = extract_tag(text)
        if tagged is not None:
            answer = self.parse_answer(tagged, inp)
            if not self.format_rule.check(text):
                return answer, 0.0
            return answer, 1.0 if answer is not None else 0.5
        if self.fallback:
            for candidate in answer_candidates(text):
                answer = self.parse_answer(candidate, inp)
                if answer is not None:
                    return answer, 0.0
        return None, 0.0

    def __call__(self, inp: RewardInput) -> RewardOutput | None:
        truth = self.parse_truth(inp)
        answer, fmt = self.extract(inp)
        parts: dict[str, float] = {}
        if answer is None:
            acc: float | None = 0.0
        else:
            result = self.accuracy(answer, truth, inp)
            if isinstance(result, Mapping):
                parts = {k: float(v) for k, v in result.items() if k != "accuracy"}
                acc = float(result["accuracy"])
            else:
                acc = None if result is None else float(result)
        if acc is None:
            return None
        score = self.accuracy_weight * acc + self.format_weight * fmt
        if -1e-9 < score < 0.0 or 1.0 < score < 1.0 + 1e-9:  # rounding of the weighted sum only
            score = min(1.0, max(0.0, score))
        return RewardOutput(score, {"accuracy": acc, "format": fmt, **parts})
