"""The comparisons of ``videorl models check``, one per check: pure functions of lists and tensors that
return a :class:`~videorl.actor.parity.CheckResult` with the first differing position and its likely
cause, so that they are tested without a model."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from videorl.actor.parity import FAIL, NA, PASS, CheckResult, short_value
from videorl.errors import AlignmentError

if TYPE_CHECKING:
    import torch


def first_difference(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """The first index where ``a`` and ``b`` differ (the shorter length if one is a prefix); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare_ids(sample: str, trainer: Sequence[int], engine: Sequence[int]) -> CheckResult:
    """``prompt_ids``: the engine's prompt ids against the framework's tokenisation."""
    pos = first_difference(list(trainer), list(engine))
    if pos is None:
        return CheckResult(
            sample, "prompt_ids", PASS, trainer=f"{len(trainer)} ids", engine=f"{len(engine)} ids"
        )
    return CheckResult(
        sample,
        "prompt_ids",
        FAIL,
        pos,
        list(trainer[pos : pos + 4]),
        list(engine[pos : pos + 4]),
        _ids_cause(len(trainer), len(engine)),
    )


def _ids_cause(trainer_len: int, engine_len: int) -> str:
    if trainer_len != engine_len:
        return (
            f"the engine expanded the visual placeholders to {engine_len - trainer_len:+d} tokens: it "
            "resized or resampled the frames, or built other timestamps (fps missing on the engine side?)"
        )
    return (
        "same length, other ids: the engine rendered other timestamps or tokens (its processor or version), "
        "or writes other placeholder ids by design (declare them in the backend's engine_token_map)"
    )


_PROMPT_MISMATCH = re.compile(
    r"\((\d+) vs (\d+) tokens, first difference at position (\d+): (\[[^\]]*\]) vs (\[[^\]]*\])\)"
)


def ids_result_from_error(sample: str, error: AlignmentError) -> CheckResult:
    """``prompt_ids`` from the engine's own check (:func:`videorl.alignment.check_same_prompt`)."""
    match = _PROMPT_MISMATCH.search(str(error))
    if match is None:
        return CheckResult(sample, "prompt_ids", FAIL, cause=str(error))
    got, want, pos, engine, trainer = match.groups()
    return CheckResult(sample, "prompt_ids", FAIL, int(pos), trainer, engine, _ids_cause(int(want), int(got)))


def visual_spans(types: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(type, start, length)`` of each run of non-zero ``types`` (``mm_token_type_ids``: 1 image, 2
    video)."""
    spans: list[tuple[int, int, int]] = []
    for i, t in enumerate(types):
        if t and spans and spans[-1][0] == t and spans[-1][1] + spans[-1][2] == i:
            spans[-1] = (t, spans[-1][1], spans[-1][2] + 1)
        elif t:
            spans.append((t, i, 1))
    return spans


def compare_items(sample: str, expected: dict[str, int], request: dict[str, int], spans: str) -> CheckResult:
    """``placeholders``: the media items per modality that the sample has and the engine request carries."""
    for kind in sorted(set(expected) | set(request)):
        if expected.get(kind, 0) != request.get(kind, 0):
            return CheckResult(
                sample,
                "placeholders",
                FAIL,
                trainer=f"{expected.get(kind, 0)} {kind}(s)",
                engine=f"{request.get(kind, 0)} {kind}(s)",
                cause=(
                    f"the engine request carries another number of {kind}s than the prompt has placeholders"
                ),
            )
    return CheckResult(sample, "placeholders", PASS, trainer=spans, engine=_count_text(request))


def _count_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}(s)" for k, n in sorted(counts.items()) if n) or "no media"


def compare_grids(
    sample: str, trainer: Sequence[Any], engine: Sequence[Any] | None, why: str = ""
) -> CheckResult:
    """``grids``: the trainer's visual grids against the engine's (None: the engine's are unknown)."""
    if engine is None:
        return CheckResult(sample, "grids", NA, trainer=list(trainer), cause=why)
    pos = first_difference(list(trainer), list(engine))
    if pos is None:
        return CheckResult(sample, "grids", PASS, trainer=list(trainer), engine=list(engine))
    return CheckResult(
        sample,
        "grids",
        FAIL,
        pos,
        trainer[pos] if pos < len(trainer) else None,
        engine[pos] if pos < len(engine) else None,
        "the engine's processor resized or resampled the frames (do_resize / do_sample_frames not off on "
        "the engine side)",
    )


#: the frame metadata keys the engine's processor reads (transformers' VideoMetadata names)
METADATA_KEYS = ("fps", "frames_indices", "total_num_frames", "duration")


def compare_frame_metadata(
    sample: str, trainer: Sequence[dict[str, Any]], engine: Sequence[dict[str, Any] | None]
) -> CheckResult:
    """``frame_metadata``: per video, what the trainer used against what the engine request carries.

    ``engine`` holds one dict per video, or None for a video sent without metadata."""
    if not trainer:
        return CheckResult(sample, "frame_metadata", NA, cause="no video")
    if all(e is None for e in engine):
        return CheckResult(sample, "frame_metadata", NA, cause="the backend sends frames without metadata")
    for video, (mine, theirs) in enumerate(zip(trainer, engine)):
        theirs = theirs or {}
        for key in METADATA_KEYS:
            if key not in mine:
                continue
            if key not in theirs:
                return CheckResult(
                    sample,
                    "frame_metadata",
                    FAIL,
                    video,
                    f"{key}={short_value(mine[key])}",
                    "missing",
                    f"{key} missing on the engine side (video {video}): the engine assumes a value of its "
                    "own "
                    + ("(other timestamps and time positions) or fails" if key == "fps" else "or fails"),
                )
            if _differs(mine[key], theirs[key]):
                return CheckResult(
                    sample,
                    "frame_metadata",
                    FAIL,
                    video,
                    f"{key}={short_value(mine[key])}",
                    f"{key}={short_value(theirs[key])}",
                    f"{key} differs between trainer and engine (video {video})",
                )
    first = trainer[0]
    return CheckResult(
        sample,
        "frame_metadata",
        PASS,
        trainer=f"{len(first['frames_indices'])} frames @ {first['fps']:g} fps",
        engine="same" if len(trainer) == 1 else f"same for {len(trainer)} videos",
    )


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return not math.isclose(float(a), float(b), rel_tol=1e-6)
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return [int(x) for x in a] != [int(x) for x in b]
    return bool(a != b)


def compare_positions(
    sample: str,
    trainer: torch.Tensor | None,
    engine: torch.Tensor | None,
    spans: Sequence[tuple[int, int, int]],
    why: str = "",
) -> CheckResult:
    """``positions``: the training forward's rotary positions (``A×L``, axes first) against the
    engine's rule; ``spans`` (:func:`visual_spans`) locate the first difference."""
    if trainer is None or engine is None:
        return CheckResult(sample, "positions", NA, cause=why)
    if trainer.shape != engine.shape:
        return CheckResult(
            sample,
            "positions",
            FAIL,
            trainer=tuple(trainer.shape),
            engine=tuple(engine.shape),
            cause="the positions have other shapes",
        )
    differs = (trainer != engine).any(dim=0).nonzero()
    if not len(differs):
        return CheckResult(sample, "positions", PASS, trainer=f"{trainer.shape[-1]} positions", engine="same")
    pos = int(differs[0])
    before = [s for s in spans if s[1] + s[2] <= pos]
    where = "inside a visual item"
    if before and not any(s[1] <= pos < s[1] + s[2] for s in spans):
        where = "after the " + ("video" if before[-1][0] == 2 else "image")
    return CheckResult(
        sample,
        "positions",
        FAIL,
        pos,
        trainer[:, pos].tolist(),
        engine[:, pos].tolist(),
        f"rope positions {where} differ: the model uses transformers' rule, the engine the original "
        "(the backend's prepare_model must install the engine's rule)",
    )


def compare_greedy(
    sample: str,
    engine_tokens: Sequence[int],
    trainer_tokens: Sequence[int],
    margins: Sequence[float],
    tolerance: float,
) -> CheckResult:
    """``greedy``: the engine's greedy tokens against the trainer's argmax given the same prefix.

    ``margins[i]`` is the trainer's log-prob of its own choice minus that of the engine's token at
    ``i``; a difference within ``tolerance`` is a near tie that rounding may decide either way."""
    for i, (e, t) in enumerate(zip(engine_tokens, trainer_tokens)):
        if e != t:
            if margins[i] <= tolerance:
                return CheckResult(
                    sample, "greedy", PASS, i, t, e, f"a near tie ({margins[i]:.2g}) decided otherwise"
                )
            return CheckResult(
                sample,
                "greedy",
                FAIL,
                i,
                t,
                e,
                f"the trainer prefers its token by {margins[i]:.3g} in log-prob: the two forwards differ",
            )
    return CheckResult(sample, "greedy", PASS, trainer=list(trainer_tokens), engine=list(engine_tokens))


def compare_logprobs(
    sample: str,
    engine: Sequence[float],
    trainer: Sequence[float],
    tolerance: float,
    cause: str = "",
    tokens: Sequence[int] = (),
) -> CheckResult:
    """``logprobs``: per-token log-probs of the same response (``tokens``, when given, name a sampled
    token the trainer forbids); FAIL at the first beyond ``tolerance``."""
    diffs = [abs(a - b) for a, b in zip(engine, trainer)]
    worst = max(diffs, default=0.0)
    for i, d in enumerate(diffs):
        if trainer[i] == -math.inf and math.isfinite(engine[i]) and i < len(tokens):
            return CheckResult(
                sample,
                "logprobs",
                FAIL,
                i,
                float(trainer[i]),
                float(engine[i]),
                f"the engine sampled token {tokens[i]}, one of the backend's forbidden_token_ids (a visual "
                "placeholder or another id training masks): the engine must suppress them",
            )
        if not d <= tolerance:  # NaN fails
            return CheckResult(
                sample,
                "logprobs",
                FAIL,
                i,
                float(trainer[i]),
                float(engine[i]),
                cause
                or (
                    f"max |diff| {worst:.3g} > {tolerance:g}: "
                    + (
                        "the prompt's forward differs (visual features, positions or weights)"
                        if i == 0
                        else "the forward diverges during the response (kernels, dtype, KV cache)"
                    )
                ),
            )
    return CheckResult(
        sample, "logprobs", PASS, trainer=f"max |diff| {worst:.2g}", engine=f"{len(diffs)} tokens"
    )


def logprob_cause(results: Sequence[CheckResult]) -> str:
    """The likely cause of a log-prob failure, from the sample's failed structural checks."""
    for r in results:
        if r.failed and r.check in ("positions", "frame_metadata", "grids"):
            return f"follows from the {r.check} failure: {r.cause}"
    return ""
