"""A multi-turn episode (``rollout.workflow: tool_agent``) as it crosses between Ray processes.

The rollout-side worker runs the workflow and sends each episode as plain values: per segment whether
it is trained (the policy's turn) or not (a tool's reply: loss mask 0), its token ids and the engine's
log-probs (NaN where unknown), its media references, and for a reply the request it was made from
(:class:`~videorl.episode.ReplyRequest`: the tool, its arguments — the window's times and frame
count —, the reply's text, the frames it showed, the sample's video and the per-call frame budget);
then the calls the episode made (what rewards read) and why it ended. Never pixels: an actor worker
rebuilds each reply's observation from its own frame cache (:func:`attach_observations`).

What arrives is checked before anything is built from it (:func:`episode_in`): every size against
the run's budgets (turns, response length, frames per call) and every field's type; a bad message is
a :class:`EpisodeMessageError` naming the sample and the field.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from videorl.episode import Episode, ReplyRequest, Segment
from videorl.errors import VideorlError
from videorl.generation import Completion
from videorl.tools.calls import MAX_CALL_CHARS, ToolCallRecord

if TYPE_CHECKING:
    from videorl.config import TrainConfig
    from videorl.encoding import Prompt
    from videorl.model_inputs import EncodedPrompt

#: the most characters of a reply's text, a call's name or reason, a media reference
MAX_TEXT = 1 << 16
#: how an episode may end (:meth:`videorl.rollout.tool_agent.ToolAgent._episode`)
ENDINGS = ("stop", "length", "max_turns", "visual_tokens")
TOKEN_LIMIT = 1 << 31


class EpisodeMessageError(VideorlError, ValueError):
    """A multi-turn episode's message is malformed (a hostile or broken worker)."""


@dataclass(frozen=True)
class Limits:
    """The run's budgets a message is checked against."""

    max_turns: int
    max_response_length: int
    max_frames_per_call: int

    @classmethod
    def of(cls, config: TrainConfig) -> Limits:
        r = config.rollout
        return cls(r.max_turns, r.max_response_length, r.max_frames_per_call)


def _video(prompt: Prompt) -> str | None:
    videos = prompt.sample.videos
    return str(videos[0]) if videos else None


def episode_out(episode: Episode, max_frames: int) -> dict[str, Any]:
    """``episode`` (a workflow's, segments and calls) as plain values; ``max_frames``: the per-call
    frame budget the replies were made under (``rollout.max_frames_per_call``)."""
    video = _video(episode.prompt)
    segments = []
    for s in episode.segments:
        request = None
        if s.request is not None:
            request = {
                **dataclasses.asdict(s.request),
                "arguments": dict(s.request.arguments),
                "video": video,
                "max_frames": max_frames,
            }
        segments.append([s.trained, s.token_ids, s.logprobs, list(s.media), request])
    calls = calls_out(episode.tool_calls)
    return {
        "segments": segments,
        "calls": calls,
        "end": episode.completion.finish_reason,
        "offline": episode.offline,
    }


def calls_out(calls: Sequence[ToolCallRecord]) -> list[list[Any]]:
    return [[c.name, c.arguments, c.turn, c.invalid, c.frames, c.reason] for c in calls]


class _Check:
    """Type and size checks of one message, naming the sample and the field."""

    def __init__(self, sample_id: str) -> None:
        self.sample_id = sample_id

    def fail(self, where: str, what: str) -> EpisodeMessageError:
        return EpisodeMessageError(
            f"sample {self.sample_id!r}: episode message field {where}: {what} (a worker sent a malformed "
            "episode: the workers must run the same videorl and config)"
        )

    def of(self, value: Any, kind: type | tuple[type, ...], where: str) -> Any:
        if not isinstance(value, kind) or (
            kind is not bool and isinstance(value, bool) and int in _kinds(kind)
        ):
            raise self.fail(where, f"expected {_name(kind)}, got {type(value).__name__}")
        return value

    def text(self, value: Any, where: str, limit: int = MAX_TEXT) -> str:
        self.of(value, str, where)
        if len(value) > limit:
            raise self.fail(where, f"{len(value)} characters, more than {limit}")
        return str(value)

    def count(self, value: Any, where: str, low: int, high: int) -> int:
        self.of(value, int, where)
        if not low <= value <= high:
            raise self.fail(where, f"{value} is outside [{low}, {high}]")
        return int(value)

    def items(self, value: Any, where: str, limit: int) -> list[Any]:
        self.of(value, list, where)
        if len(value) > limit:
            raise self.fail(where, f"{len(value)} entries, more than {limit}")
        return list(value)

    def arguments(self, value: Any, where: str) -> dict[str, Any]:
        self.of(value, dict, where)
        if len(json.dumps(value)) > MAX_CALL_CHARS:
            raise self.fail(where, f"longer than the {MAX_CALL_CHARS} characters of a tool call")
        return dict(value)


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _name(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in _kinds(kind))


def calls_in(value: Any, sample_id: str, limits: Limits, where: str = "calls") -> list[ToolCallRecord]:
    """The calls of :func:`calls_out`, checked."""
    check = _Check(sample_id)
    out = []
    for i, row in enumerate(check.items(value, where, limits.max_turns)):
        at = f"{where}[{i}]"
        name, arguments, turn, invalid, frames, reason = _row(check, row, at, 6)
        out.append(
            ToolCallRecord(
                check.text(name, f"{at}.name", 256),
                check.arguments(arguments, f"{at}.arguments"),
                check.count(turn, f"{at}.turn", 1, limits.max_turns),
                check.of(invalid, bool, f"{at}.invalid"),
                check.count(frames, f"{at}.frames", 0, limits.max_frames_per_call),
                None if reason is None else check.text(reason, f"{at}.reason"),
            )
        )
    return out


def _row(check: _Check, row: Any, where: str, n: int) -> list[Any]:
    check.of(row, list, where)
    if len(row) != n:
        raise check.fail(where, f"{len(row)} entries, expected {n}")
    return list(row)


def _tokens(check: _Check, ids: Any, logprobs: Any, where: str, room: int) -> tuple[list[int], list[float]]:
    ids = check.items(ids, f"{where}.token_ids", room)
    logprobs = check.items(logprobs, f"{where}.logprobs", room)
    if len(ids) != len(logprobs):
        raise check.fail(where, f"{len(ids)} token ids but {len(logprobs)} log-probs")
    for k, i in enumerate(ids):
        check.count(i, f"{where}.token_ids[{k}]", 0, TOKEN_LIMIT)
    for k, p in enumerate(logprobs):
        check.of(p, (float, int), f"{where}.logprobs[{k}]")
        if p > 0 or p == -math.inf:
            raise check.fail(f"{where}.logprobs[{k}]", f"{p} is not a log-probability")
    return ids, [float(p) for p in logprobs]


def _request(check: _Check, value: Any, where: str, prompt: Prompt, limits: Limits) -> ReplyRequest:
    check.of(value, dict, where)
    keys = {"tool", "arguments", "text", "frames", "video", "max_frames"}
    if set(value) != keys:
        raise check.fail(where, f"keys {sorted(value)}, expected {sorted(keys)}")
    if value["video"] != _video(prompt):
        raise check.fail(f"{where}.video", f"{value['video']!r} is not the sample's video {_video(prompt)!r}")
    if value["max_frames"] != limits.max_frames_per_call:
        raise check.fail(
            f"{where}.max_frames", f"{value['max_frames']!r}, but rollout.max_frames_per_call is "
            f"{limits.max_frames_per_call} here",
        )  # fmt: skip
    return ReplyRequest(
        check.text(value["tool"], f"{where}.tool", 256),
        check.arguments(value["arguments"], f"{where}.arguments"),
        check.text(value["text"], f"{where}.text"),
        check.count(value["frames"], f"{where}.frames", 0, limits.max_frames_per_call),
    )


def episode_in(prompt: Prompt, group: int, value: Any, limits: Limits) -> Episode:
    """The episode of :func:`episode_out` for ``prompt`` in ``group``, checked (replies without their
    observations: :func:`attach_observations` rebuilds them where frames are at hand)."""
    check = _Check(prompt.sample.id)
    check.of(value, dict, "(episode)")
    if set(value) != {"segments", "calls", "end", "offline"}:
        raise check.fail("(episode)", f"keys {sorted(value)}, expected calls, end, offline, segments")
    room = limits.max_response_length
    segments = []
    for i, row in enumerate(check.items(value["segments"], "segments", 2 * limits.max_turns)):
        at = f"segments[{i}]"
        trained, ids, logprobs, media, request = _row(check, row, at, 5)
        check.of(trained, bool, f"{at}.trained")
        ids, logprobs = _tokens(check, ids, logprobs, at, room)
        room -= len(ids)
        refs = tuple(
            check.text(m, f"{at}.media[{k}]") for k, m in enumerate(check.items(media, f"{at}.media", 64))
        )
        if trained and (request is not None or refs):
            raise check.fail(at, "a policy turn carries no tool request or media")
        if not trained and request is None:
            raise check.fail(f"{at}.request", "a tool reply needs the request it was made from")
        made = None if request is None else _request(check, request, f"{at}.request", prompt, limits)
        segments.append(Segment(ids, logprobs, trained, refs, request=made))
    if not segments or not segments[0].trained or not segments[-1].trained:
        raise check.fail("segments", "an episode starts and ends with a policy turn")
    end = value["end"]
    if end not in ENDINGS:
        raise check.fail("end", f"{end!r} is not one of {', '.join(ENDINGS)}")
    last = segments[-1]
    completion = Completion(last.token_ids, last.logprobs, end)
    calls = calls_in(value["calls"], prompt.sample.id, limits)
    offline = check.of(value["offline"], bool, "offline")
    return Episode(prompt, group, completion, offline=offline, segments=segments, tool_calls=calls)


def attach_observations(episode: Episode, rebuild: Callable[[ReplyRequest], EncodedPrompt]) -> Episode:
    """``episode`` with each reply's observation rebuilt here (``rebuild``: from this process's frames,
    :meth:`~videorl.rollout.tool_agent.ToolAgent.rebuild_reply`); a reply whose tokens come out other
    than the message's is an :class:`EpisodeMessageError`."""
    for i, s in enumerate(episode.segments):
        if s.request is None:
            continue
        observation = rebuild(s.request)
        if observation.prompt_ids != s.token_ids:
            raise _Check(episode.prompt.sample.id).fail(
                f"segments[{i}].token_ids",
                f"the reply re-encoded here is {len(observation.prompt_ids)} tokens that differ from the "
                f"{len(s.token_ids)} rolled out (the workers' frame caches, tools or processors differ)",
            )
        s.observation = observation
    return episode
