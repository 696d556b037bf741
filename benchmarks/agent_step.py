"""Step time of the tool workflow against single-turn at an equal visual-token budget per sample, and
the latency of a tool call served from the frames the cache gave the prompt (issue 30's figure).

A tiny random Qwen2.5-VL, ``--prompts`` prompts × ``--n`` episodes, each step a rollout (the ``hf``
engine) and the actor's forward and backward over the episodes. Single-turn: the prompt shows
``--frames`` frames and the policy writes ``--tokens`` tokens. Tool workflow: the prompt shows half of
them as the overview, the policy's first turn is a ``get_frames`` call for the other half (teacher-forced:
a random model writes no call), its reply is appended as a video turn and the policy writes ``--tokens``
tokens: the same visual tokens per episode (the issue's target: tool step ≤ 1.5× single-turn). The
tool-call latency is ``run_tool`` of ``get_frames`` on the sample's :class:`FrameSource` and, apart,
the backend's ``encode_observation`` of its reply (median and p95 over ``--calls``).

Usage: ``python benchmarks/agent_step.py [--prompts 2] [--n 4] [--frames 8] [--tokens 16]`` (one JSON
line; about a minute and a half on 2 shared cores).

Measured 2026-12-02 (defaults; 2 cores shared with other jobs, load ~6): 64 visual tokens per episode
both ways; step 1.27 s single-turn, 2.16 s tool workflow (1.71×, over the 1.5× target: the ``hf``
engine prefills the whole context again for the second turn); a get_frames call 0.77 ms median
(13.6 ms p95), encoding its reply 7.3 ms median (23.1 ms p95).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from videorl.actor.update import forward_responses
from videorl.backend import PromptInput, backend_for_model
from videorl.config import TrainConfig
from videorl.data import Sample
from videorl.encoding import Prompt
from videorl.generation import Completion, SamplingParams
from videorl.media.metadata import VideoMetadata
from videorl.model_inputs import EncodedPrompt
from videorl.plugins import load_plugins
from videorl.rollout.hf import HFEngine
from videorl.tools import ToolContext, run_tool
from videorl.tools.video import FrameSource
from videorl.train.compose import make_workflow

SIDE = 112  # 4×4 merged patches a frame: 16 visual tokens per temporal patch


class CallFirst(HFEngine):
    """Writes the get_frames call as the policy's first turn (no sampling), then generates."""

    def __init__(self, backend: Any, model: Any, call: str, tokens: int) -> None:
        super().__init__(backend, model)
        self.tokens = tokens  # the answer's length, as single-turn's
        self.call = [*backend.tokenizer.encode(call), backend.end_of_turn_id()]
        self.start = backend.tokenizer.convert_tokens_to_ids("<|im_start|>")

    def generate(self, prompts: Sequence[EncodedPrompt], params: SamplingParams) -> list[list[Completion]]:
        if all(p.prompt_ids.count(self.start) == 3 for p in prompts):  # system, user, assistant: turn 1
            return [[Completion(self.call, [0.0] * len(self.call), "stop")] * params.n for _ in prompts]
        return super().generate(prompts, replace(params, max_tokens=min(params.max_tokens, self.tokens)))


def _prompts(backend: Any, count: int, frames: int) -> list[Prompt]:
    """``count`` prompts of ``frames`` random frames at 2 fps (the cache's frames)."""
    meta = VideoMetadata.every_frame(frames, SIDE, SIDE, fps=2.0)
    out = []
    for i in range(count):
        video = torch.randint(0, 256, (frames, 3, SIDE, SIDE), dtype=torch.uint8)
        encoded = backend.encode(PromptInput(f"v{i}", "Which colour?", videos=[(video, meta)]))
        out.append(Prompt(Sample(id=f"v{i}", data_type="video", problem="Which colour?"), encoded, None))
    return out


def _step(
    config: TrainConfig, workflow: Any, prompts: list[Prompt], engine: Any, backend: Any
) -> tuple[float, int]:
    """Seconds of one step (the rollout, then the actor's forward and backward over its episodes) and
    the visual tokens of its first episode (prompt and replies)."""
    model = engine.model
    start = time.perf_counter()
    groups, _ = workflow.rollout(config, prompts, engine, lambda episodes: None, backend, seed=0)
    episodes = [e for g in groups for e in g]
    logp, _, mask = forward_responses(model, backend, episodes, sorted(backend.forbidden_token_ids()))
    (-(logp * mask).sum()).backward()
    model.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - start
    pad, first = backend.token_ids["video"], episodes[0]
    return seconds, (first.prompt.require_encoded().prompt_ids + first.response_ids).count(pad)


def _latency(backend: Any, calls: int) -> dict[str, dict[str, float]]:
    """Milliseconds of a get_frames call (median, p95) and of encoding its reply."""
    frames = torch.randint(0, 256, (64, 3, SIDE, SIDE), dtype=torch.uint8)
    source = FrameSource(frames, VideoMetadata.every_frame(64, SIDE, SIDE, fps=2.0), temporal_patch=2)
    context = ToolContext("v", source, factor=backend.factor)
    tools = {"get_frames": load_plugins().tools.create("get_frames")}
    call_ms, encode_ms = [], []
    for i in range(calls):
        start = time.perf_counter()
        result = run_tool(tools, "get_frames", {"start": i % 24, "end": i % 24 + 8, "n": 8}, context)
        call_ms.append(1000 * (time.perf_counter() - start))
        start = time.perf_counter()
        backend.encode_observation(PromptInput("v", result.text, videos=result.videos))
        encode_ms.append(1000 * (time.perf_counter() - start))

    def summary(values: list[float]) -> dict[str, float]:
        ordered = sorted(values)
        p95 = ordered[int(0.95 * (len(ordered) - 1))]
        return {"median": round(statistics.median(ordered), 3), "p95": round(p95, 3)}

    return {"tool_call_ms": summary(call_ms), "encode_reply_ms": summary(encode_ms)}


def _timed(args: argparse.Namespace, backend: Any, model: Any) -> dict[str, Any]:
    """Median step seconds of each workflow (after a warm-up step) and their visual tokens."""
    plugins, half = load_plugins(), args.frames // 2
    single = TrainConfig()
    single.rollout.n, single.rollout.max_response_length = args.n, args.tokens
    agent = TrainConfig()
    agent.rollout.n, agent.rollout.max_turns, agent.rollout.tools = args.n, 2, ["get_frames"]
    agent.rollout.max_response_length = 4096  # the call, the reply and the answer (capped by the engine)
    call = (
        '<tool_call>{"name": "get_frames", "arguments": '
        f'{{"start": 0, "end": {half / 2}, "n": {half}}}}}</tool_call>'
    )
    runs = {
        "single_turn": (single, _prompts(backend, args.prompts, args.frames), HFEngine(backend, model)),
        "tool_agent": (
            agent,
            _prompts(backend, args.prompts, half),
            CallFirst(backend, model, call, args.tokens),
        ),
    }
    out: dict[str, Any] = {"step_seconds": {}, "visual_tokens_per_episode": {}}
    for name, (config, prompts, engine) in runs.items():
        workflow = make_workflow(plugins, name, config)
        _, visual = _step(config, workflow, prompts, engine, backend)  # warm-up
        seconds = [_step(config, workflow, prompts, engine, backend)[0] for _ in range(args.rounds)]
        out["step_seconds"][name] = round(statistics.median(seconds), 3)
        out["visual_tokens_per_episode"][name] = visual
    if len(set(out["visual_tokens_per_episode"].values())) != 1:
        raise RuntimeError(f"unequal visual budgets: {out['visual_tokens_per_episode']}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument(
        "--frames", type=int, default=8, help="single-turn's frames (even; the tool: half + half)"
    )
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    from videorl_models.tiny import build_tiny

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny("qwen2_5_vl", Path(tmp) / "tiny", seed=0)
        backend = backend_for_model(path, load_plugins().model_backends)
        model = backend.load_model(dtype=torch.float32)
        timed = _timed(args, backend, model)
        latency = _latency(backend, args.calls)
    seconds = timed["step_seconds"]
    result = {
        "prompts": args.prompts, "n": args.n, "frames_per_episode": args.frames, "answer_tokens": args.tokens,
        **timed, "tool_over_single": round(seconds["tool_agent"] / seconds["single_turn"], 2), "target": 1.5,
        **latency,
    }  # fmt: skip
    print(json.dumps(result))


if __name__ == "__main__":
    main()
