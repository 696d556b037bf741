"""The tool-using rollout workflow (``rollout.workflow: tool_agent``): the policy writes a tool call in
Qwen's format (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``), the workflow runs the tool
(``rollout.tools``) and appends its reply as a tool turn, and the policy goes on, up to
``rollout.max_turns`` turns.

The trajectory is append-only tokens: each turn's tokens are kept as the engine returned them (with
their log-probs), each reply is encoded by the backend as the chat template appends it
(``encode_observation``; earlier turns are never re-rendered) and is a ``trained=False`` segment whose
media the training forward sees where the engine saw it. Budgets end a trajectory with a reason, never
inside a reply: the total response length (``rollout.max_response_length``), the visual tokens of the
replies (``rollout.max_visual_tokens``) and the turns; frames per call (``rollout.max_frames_per_call``)
refuse the call instead. Every engine is given the whole context each turn: ``hf`` prefills it and
runs the vision tower over all of its media again; ``vllm`` (``incremental``) encodes only the new
reply's media (its encoder cache keeps the earlier items' outputs by content) and, with its prefix cache
(on by default, CPU included), computes the KV of the new tokens and of the last partial block only.

``rollout.tool_frames`` says where ``get_frames`` takes a window's frames: ``prompt``, the frames the
prompt's video was decoded to; ``decode``, the window decoded afresh at the ``data.video_*`` budget
(through the prompt's media loader and cache), so a call sees what the prompt's overview missed.
With mix-policy the last slot of a group may hold the sample's offline trajectory, replayed turn by
turn through the same code as the policy's (:func:`offline_turns`): its calls run and their replies
are the tools' own.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from videorl.algorithms import formulas as algo
from videorl.alignment import check_response_tokens
from videorl.encoding import media_loader
from videorl.episode import Episode, ReplyRequest, Segment
from videorl.errors import ConfigError, RegistryError
from videorl.generation import Completion, SamplingParams
from videorl.model_inputs import EncodedPrompt, PromptInput, continue_encoded
from videorl.rollout.scoring import accuracy_of
from videorl.rollout.single_turn import offline_completion
from videorl.timing import StageTimer
from videorl.tools import (
    Tool,
    ToolCallRecord,
    ToolContext,
    ToolResult,
    VideoSource,
    check_tool_schema,
    parse_tool_call,
    run_tool,
    tool_spec,
)
from videorl.tools.calls import CLOSE
from videorl.tools.video import FrameSource, WindowSource

if TYPE_CHECKING:
    from collections.abc import Callable

    from videorl.backend import ModelBackend
    from videorl.config import TrainConfig
    from videorl.data import Sample
    from videorl.encoding import Prompt
    from videorl.generation import RolloutEngine
    from videorl.media.loader import MediaLoader
    from videorl.plugins import Plugins
    from videorl.rollout.scoring import Scorer


NO_BASELINE = "rollout.workflow tool_agent makes no greedy baseline (ReMax): choose another estimator"


@dataclass
class _Trajectory:
    """One episode while it is generated: the context the engine continues and what it appended."""

    prompt: Prompt
    context: EncodedPrompt
    tools: ToolContext
    segments: list[Segment] = field(default_factory=list)
    last: Completion | None = None
    ended: str | None = None  # why it ended: answer, length, max_turns, visual_tokens
    turns: int = 0
    visual_tokens: int = 0
    calls: list[ToolCallRecord] = field(default_factory=list)

    @property
    def length(self) -> int:
        return sum(len(s.token_ids) for s in self.segments)


def _media_refs(result: ToolResult) -> tuple[str, ...]:
    """What a reply shows, named by the sample video's frames (indices into its source)."""
    videos = [f"video:frames={','.join(map(str, m.frame_indices))}" for _, m in result.videos]
    return (*videos, *(f"image:{i}" for i in range(len(result.images))))


class ToolAgent:
    """The :class:`~videorl.rollout.workflow.RolloutWorkflow` of tool-using episodes. ``tools``: by
    name; without them :meth:`setup` takes ``rollout.tools`` from the registry."""

    name = "tool_agent"

    def __init__(self, tools: Mapping[str, Tool] | None = None) -> None:
        self.tools: dict[str, Tool] = dict(tools or {})
        self._loader: MediaLoader | None = None  # rollout.tool_frames decode: made at the first call

    def setup(self, config: TrainConfig, plugins: Plugins) -> None:
        """Make the tools ``rollout.tools`` names (once, at the composition root)."""
        if config.rollout.tool_frames == "decode" and config.data.source_mode == "preprocessed_only":
            raise ConfigError(
                "rollout.tool_frames: decode decodes the windows the policy asks for, which no cache built "
                "ahead holds: set data.source_mode to prefer_preprocessed (cached once decoded)"
            )
        if not config.rollout.tools:
            raise ConfigError(
                "rollout.tools: the tool_agent workflow needs at least one tool (e.g. [get_frames])"
            )
        for name in config.rollout.tools:
            try:
                tool = plugins.tools.create(name)
            except RegistryError as exc:
                raise ConfigError(f"rollout.tools: {exc}") from None
            try:
                check_tool_schema(tool)
            except TypeError as exc:
                raise ConfigError(f"rollout.tools: {exc}") from None
            self.tools[tool.name] = tool

    def prompt_tools(self, sample: Sample) -> list[dict[str, Any]]:
        """The tools a prompt offers, as chat templates take them (the backend renders them in the
        system turn: Qwen's ``<tools>`` block)."""
        return [tool_spec(tool) for tool in self.tools.values()]

    def _context(self, config: TrainConfig, backend: ModelBackend, prompt: Prompt) -> ToolContext:
        encoded = prompt.require_encoded()
        videos = encoded.prompt.videos
        source: VideoSource | None = None
        if videos and config.rollout.tool_frames == "decode":
            if self._loader is None:
                self._loader = media_loader(config.data, backend)
            path, loader = prompt.sample.videos[0], self._loader
            source = WindowSource(
                *videos[0], lambda s, e: loader.video(path, clip=(s, e)), backend.temporal_patch_size
            )
        elif videos:
            source = FrameSource(*videos[0], temporal_patch=backend.temporal_patch_size)
        return ToolContext(
            encoded.sample_id, source, factor=backend.factor,
            max_frames=config.rollout.max_frames_per_call, zoom_max_pixels=backend.budget.image_max_pixels,
        )  # fmt: skip

    def rollout(
        self,
        config: TrainConfig,
        prompts: Sequence[Prompt],
        engine: RolloutEngine,
        scorer: Scorer,
        backend: ModelBackend,
        *,
        seed: int | None,
        first_group: int = 0,
        timer: StageTimer | None = None,
        baseline: bool = False,
    ) -> tuple[list[list[Episode]], dict[str, float]]:
        """``rollout.n`` tool-using episodes per prompt (:meth:`generate`), scored; with mix-policy the
        offline trajectories replayed into the groups the decision picks (:func:`mix_offline`)."""
        if baseline:
            raise ConfigError(NO_BASELINE)
        timer = timer or StageTimer()
        groups, metrics = self.generate(
            config, prompts, engine, backend, seed=seed, first_group=first_group, timer=timer
        )
        with timer("reward"):
            scorer([e for group in groups for e in group])
        if config.rollout.enable_mix_policy:
            with timer("rollout", "offline trajectories"):
                metrics.update(
                    mix_offline(
                        config, groups, scorer, lambda p, g: self.replay_offline(config, backend, p, g)
                    )
                )
        return groups, metrics

    def generate(
        self,
        config: TrainConfig,
        prompts: Sequence[Prompt],
        engine: RolloutEngine,
        backend: ModelBackend,
        *,
        seed: int | None,
        first_group: int = 0,
        timer: StageTimer | None = None,
    ) -> tuple[list[list[Episode]], dict[str, float]]:
        """``rollout.n`` episodes per prompt, generated turn by turn (every open episode in one engine
        call per turn), unscored, and the ``tool/*`` counters (what a Ray rollout worker runs)."""
        encode = self._observation_encoder(backend)
        timer = timer or StageTimer()
        r = config.rollout
        open_ = [
            _Trajectory(p, p.require_encoded(), self._context(config, backend, p))
            for p in prompts
            for _ in range(r.n)
        ]
        counts: Counter[str] = Counter()
        forbidden = backend.forbidden_token_ids() | set(config.model.suppress_token_ids)
        for turn in range(r.max_turns):
            active = [t for t in open_ if t.ended is None]
            if not active:
                break
            params = SamplingParams(
                n=1, temperature=r.temperature, top_p=r.top_p, top_k=max(r.top_k, 0),
                max_tokens=max(r.max_response_length - t.length for t in active),  # each cut to its room
                seed=None if seed is None else seed + turn,
            )  # fmt: skip
            with timer("rollout", f"turn {turn + 1}: {len(active)} episodes"):
                outputs = engine.generate([t.context for t in active], params)
                for t, (completion,) in zip(active, outputs, strict=True):
                    check_response_tokens(t.prompt.sample.id, completion.token_ids, forbidden)
                    self._turn(config, backend, encode, t, completion, counts)
        groups = [
            [self._episode(t, first_group + g) for t in open_[g * r.n : (g + 1) * r.n]]
            for g in range(len(prompts))
        ]
        return groups, self._metrics(open_, counts)

    def _observation_encoder(self, backend: ModelBackend) -> Any:
        """The backend's ``encode_observation`` (a tool reply as the chat template appends it)."""
        if not self.tools:
            raise ConfigError("rollout.workflow tool_agent has no tools: set rollout.tools")
        encode = getattr(backend, "encode_observation", None)
        if encode is None:
            raise ConfigError(
                f"the {backend.family} backend cannot encode a tool's reply (no encode_observation)"
            )
        return encode

    def replay_offline(
        self, config: TrainConfig, backend: ModelBackend, prompt: Prompt, group: int
    ) -> Episode:
        """``prompt``'s offline trajectory as an episode of ``group`` (unscored), replayed turn by turn
        (:func:`offline_turns`) through the policy's code: its calls run, their replies are the tools'."""
        encode = self._observation_encoder(backend)
        t = _Trajectory(prompt, prompt.require_encoded(), self._context(config, backend, prompt))
        for text in offline_turns(prompt.sample.offline_output or ""):
            if t.ended is not None:
                break
            room = config.rollout.max_response_length - t.length
            self._turn(config, backend, encode, t, offline_completion(backend, text, room), Counter())
        t.ended = t.ended or "max_turns"  # its text ended on a call: no answer
        episode = self._episode(t, group)
        episode.offline = True
        return episode

    def rebuild_reply(
        self, config: TrainConfig, backend: ModelBackend, prompt: Prompt, request: ReplyRequest
    ) -> EncodedPrompt:
        """A tool reply made in another process (its :class:`~videorl.episode.ReplyRequest`), encoded here
        from this process's frames: a reply that showed media has its call run again on ``prompt``'s
        video (this process's frame cache). A call that now fails or shows another number of frames
        is a ``ValueError``."""
        encode = self._observation_encoder(backend)
        videos: list[Any] = []
        images: list[Any] = []
        if request.frames:
            context = self._context(config, backend, prompt)
            result = run_tool(self.tools, request.tool, dict(request.arguments), context)
            if result.invalid or result.frames != request.frames:
                raise ValueError(
                    f"sample {prompt.sample.id!r}: the {request.tool} call showed {request.frames} frame(s) "
                    f"where it was rolled out and {result.frames} here ({result.text[:200]}): the "
                    "workers' frame caches or tools differ"
                )
            videos, images = result.videos, result.images
        sample_id = prompt.require_encoded().sample_id
        observation: EncodedPrompt = encode(
            PromptInput(sample_id, request.text, videos=videos, images=images)
        )
        return observation

    def _turn(
        self,
        config: TrainConfig,
        backend: ModelBackend,
        encode: Any,
        t: _Trajectory,
        completion: Completion,
        counts: Counter[str],
    ) -> None:
        """Append the policy's turn, then (when it called a tool and the budgets allow) the tool's reply."""
        r = config.rollout
        room = r.max_response_length - t.length
        ids, logprobs = completion.token_ids[:room], completion.logprobs[:room]
        t.segments.append(Segment(list(ids), list(logprobs)))
        t.context = continue_encoded(t.context, ids)
        t.turns += 1
        t.last = Completion(list(ids), list(logprobs), completion.finish_reason)
        if completion.finish_reason == "length" or len(completion.token_ids) > room:
            t.ended = "length"  # a call cut off is not run
            return
        call = parse_tool_call(backend.tokenizer.decode(ids, skip_special_tokens=False))
        if call is None:
            t.ended = "answer"
            return
        if t.turns >= r.max_turns:
            t.ended = "max_turns"
            return
        result = self._call(t, call.name, call.arguments, call.error, counts)
        if call.extra:
            result.text += f" (only the first tool call of a turn runs; {call.extra} more ignored)"
        observation: EncodedPrompt = encode(
            PromptInput(t.context.sample_id, result.text, videos=result.videos, images=result.images)
        )
        visual = sum(1 for k in observation.mm_token_type_ids or () if k)
        if t.length + len(observation.prompt_ids) >= r.max_response_length:
            t.ended = "length"  # the reply would not fit with a token of answer after it: not cut
        elif r.max_visual_tokens is not None and t.visual_tokens + visual > r.max_visual_tokens:
            t.ended = "visual_tokens"
        else:
            ids = observation.prompt_ids
            t.segments.append(
                Segment(
                    list(ids),
                    [math.nan] * len(ids),
                    trained=False,
                    media=_media_refs(result),
                    observation=observation,
                    request=ReplyRequest(call.name, call.arguments, result.text, result.frames),
                )
            )
            t.context = continue_encoded(t.context, [], observation)
            t.visual_tokens += visual
            counts["frames"] += result.frames

    def _call(
        self, t: _Trajectory, name: str, arguments: dict[str, Any], error: str | None, counts: Counter[str]
    ) -> ToolResult:
        """Run one call (a call that could not be read is an invalid one), counted per tool."""
        if error is not None:
            result = ToolResult(f"Error: {error}.", invalid=True)
        else:
            result = run_tool(self.tools, name, arguments, t.tools)
        counts[f"calls/{name if name in self.tools else '(unknown)'}"] += 1
        counts["invalid_calls"] += result.invalid
        reason = result.text if result.invalid else None
        t.calls.append(ToolCallRecord(name, arguments, t.turns, result.invalid, result.frames, reason))
        return result

    @staticmethod
    def _episode(t: _Trajectory, group: int) -> Episode:
        """The finished trajectory; its last completion's ``finish_reason`` says why it ended: ``stop``
        (it answered), ``length`` (the response budget: DAPO's overlong filtering treats it as cut),
        ``max_turns`` or ``visual_tokens``."""
        assert t.last is not None and t.ended is not None  # every trajectory runs at least one turn
        reason = "stop" if t.ended == "answer" else t.ended
        completion = Completion(t.last.token_ids, t.last.logprobs, reason)
        return Episode(t.prompt, group, completion, segments=t.segments, tool_calls=t.calls)

    @staticmethod
    def _metrics(trajectories: Sequence[_Trajectory], counts: Counter[str]) -> dict[str, float]:
        """``tool/*``: turns and visual tokens per episode, calls per tool, invalid calls, frames
        fetched, and the count of each ending (answer, length, max_turns, visual_tokens)."""
        n = max(len(trajectories), 1)
        out = {
            "tool/turns_per_episode": sum(t.turns for t in trajectories) / n,
            "tool/visual_tokens_per_episode": sum(t.visual_tokens for t in trajectories) / n,
        }
        out.update({f"tool/{k}": float(v) for k, v in counts.items()})
        for reason, count in Counter(t.ended for t in trajectories).items():
            out[f"tool/end/{reason}"] = float(count)
        return out


def offline_turns(text: str) -> list[str]:
    """An offline trajectory's policy turns: each turn ends after a tool call (``</tool_call>``, as the
    chat template ends an assistant turn that calls a tool); the rest is the last turn (the answer)."""
    parts = text.split(CLOSE)
    turns = [part + CLOSE for part in parts[:-1]]
    return [*turns, parts[-1]] if parts[-1] or not turns else turns


def mix_offline(
    config: TrainConfig,
    groups: list[list[Episode]],
    scorer: Scorer,
    replay: Callable[[Prompt, int], Episode],
) -> dict[str, float]:
    """Mix-policy over scored ``groups``: the last episode of each group the decision picks becomes
    ``replay(prompt, group)`` (the sample's offline trajectory, made here or by a Ray rollout worker),
    scored; the counters."""
    decision = algo.mix_policy_decision(
        [group[-1].prompt.sample.has_offline_trajectory for group in groups],
        [[accuracy_of(e) for e in group] for group in groups],
        config.rollout.mix_policy_accuracy_threshold,
    )
    replaced = []
    for group, replace in zip(groups, decision.replace):
        if replace:
            group[-1] = replay(group[-1].prompt, group[-1].group)
            replaced.append(group[-1])
    scorer(replaced)
    return decision.metrics()
