"""The tool_agent workflow end to end on a tiny model: a scripted engine writes a tool call, the workflow
runs get_frames and appends its reply (a video segment) as a tool turn, the engine answers; the episode's
segments, loss mask and counters are those expected, and the actor's forward over the episode (media of
the reply included) gives the engine's log-probs of every generated token."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from videorl.actor.update import forward_responses
from videorl.backend import PromptInput, backend_for_model
from videorl.config import TrainConfig, load_rewards
from videorl.data import Sample, parse_row
from videorl.encoding import Prompt
from videorl.episode import Episode
from videorl.errors import ConfigError, DataError
from videorl.generation import Completion, SamplingParams
from videorl.media.metadata import VideoMetadata
from videorl.model_inputs import EncodedPrompt, response_logprobs
from videorl.plugins import load_plugins
from videorl.rewards import RewardConfig, RewardInput, RewardOutput
from videorl.rewards.router import RewardRouter
from videorl.rollout.hf import HFEngine
from videorl.rollout.scoring import local_scorer
from videorl.rollout.single_turn import SingleTurn
from videorl.rollout.tool_agent import ToolAgent
from videorl.tools import ToolCallRecord, tool_spec
from videorl.train.compose import make_workflow, row_workflows
from videorl.train.step import step_metrics

CALL = '<tool_call>{"name": "get_frames", "arguments": {"start": 2, "end": 4, "n": 4}}</tool_call>'
ANSWER = "<answer>B</answer>"


class ScriptedEngine:
    """Writes ``replies[k]`` as the policy's ``k``-th turn (``k`` read from the context's turn headers),
    with the log-probs the model gives those tokens after the context (what a real engine reports)."""

    def __init__(self, backend: Any, model: Any, replies: Sequence[str]) -> None:
        self.backend, self.model, self.replies = backend, model, replies
        self.start = backend.tokenizer.convert_tokens_to_ids("<|im_start|>")
        self.contexts: list[EncodedPrompt] = []

    def generate(self, prompts: Sequence[EncodedPrompt], params: SamplingParams) -> list[list[Completion]]:
        out = []
        for prompt in prompts:
            self.contexts.append(prompt)
            turn = (prompt.prompt_ids.count(self.start) - 3) // 2  # system, user, assistant; +2 per reply
            ids = [*self.backend.tokenizer.encode(self.replies[turn]), self.backend.end_of_turn_id()]
            inputs = self.backend.collate([prompt], [ids])
            with torch.no_grad():
                logits = self.model(**inputs.model_kwargs()).logits
            lp = response_logprobs(logits, inputs, forbidden=self.backend.forbidden_token_ids())[0]
            out.append([Completion(ids, lp.tolist(), "stop")] * params.n)
        return out

    def update_weights(self, state_dict: Any) -> None: ...

    def close(self) -> None: ...


@pytest.fixture(scope="module")
def setup(tiny_model_dir: Callable[[str], Path]) -> tuple[Any, Any, Prompt]:
    backend: Any = backend_for_model(tiny_model_dir("qwen2_5_vl"), load_plugins().model_backends)
    model = backend.load_model(dtype=torch.float32)
    side = 2 * backend.factor
    frames = torch.randint(
        0, 256, (16, 3, side, side), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    video = (frames, VideoMetadata.every_frame(16, side, side, fps=2.0))  # 0 … 7.5 s
    encoded = backend.encode(PromptInput("s", "Which colour?", videos=[video]))
    return backend, model, Prompt(Sample(id="s", data_type="video", problem="Which colour?"), encoded, None)


def _config(**rollout: Any) -> TrainConfig:
    config = TrainConfig()
    config.rollout.n, config.rollout.tools, config.rollout.max_response_length = 2, ["get_frames"], 512
    for key, value in rollout.items():
        setattr(config.rollout, key, value)
    return config


def _scorer(episodes: Sequence[Episode]) -> None:
    for e in episodes:
        e.reward = 1.0


def _run(setup: Any, replies: Sequence[str], **rollout: Any) -> tuple[list[Episode], dict[str, float], Any]:
    backend, model, prompt = setup
    config = _config(**rollout)
    workflow = make_workflow(load_plugins(), "tool_agent", config)
    engine = ScriptedEngine(backend, model, replies)
    groups, metrics = workflow.rollout(config, [prompt], engine, _scorer, backend, seed=0, first_group=5)
    assert len(groups) == 1 and len(groups[0]) == 2 and all(e.group == 5 for e in groups[0])
    return groups[0], metrics, engine


def test_a_tool_call_becomes_a_video_turn_that_the_actor_forward_sees(setup: Any) -> None:
    backend, model, prompt = setup
    episodes, metrics, engine = _run(setup, [CALL, ANSWER])
    episode = episodes[0]
    gen1, obs, gen2 = episode.segments
    assert [s.trained for s in episode.segments] == [True, False, True]
    assert backend.tokenizer.decode(gen2.token_ids, skip_special_tokens=True) == ANSWER
    assert obs.media == ("video:frames=4,5,7,8",)  # 2.0, 2.5, 3.5, 4.0 s of the 2 fps source
    assert "4 frames from 2.00 s to 4.00 s:" in backend.tokenizer.decode(obs.token_ids)
    assert episode.loss_mask == [True] * len(gen1.token_ids) + [False] * len(obs.token_ids) + [True] * len(
        gen2.token_ids
    )
    assert episode.completion.finish_reason == "stop" and episode.reward == 1.0
    assert metrics == {
        "tool/turns_per_episode": 2.0,
        "tool/visual_tokens_per_episode": 8.0,  # 4 frames of 2·factor: grid (2, 4, 4) / merge² = 8
        "tool/calls/get_frames": 2.0,
        "tool/invalid_calls": 0.0,
        "tool/frames": 8.0,
        "tool/end/answer": 2.0,
    }
    # append-only: the second turn's context is the prompt, the first turn and the reply, token for token
    second = engine.contexts[-1]
    assert second.prompt_ids == prompt.require_encoded().prompt_ids + gen1.token_ids + obs.token_ids
    assert second.video_grid_thw == [(8, 4, 4), (2, 4, 4)]

    inputs = backend.collate([prompt.require_encoded()], [episode.response_input()])
    assert inputs.video_grid_thw.tolist() == [[8, 4, 4], [2, 4, 4]]  # the reply's video is in the forward
    forbidden = sorted(backend.forbidden_token_ids())
    logp, _, mask = forward_responses(model, backend, episodes, forbidden)
    assert mask[0].bool().tolist() == episode.loss_mask
    # the reply's visual placeholders are forbidden targets: 0 there, never -inf (NaN ratios and KL)
    assert torch.isfinite(logp).all() and not logp[~mask.bool()].any()
    engine_lp = torch.tensor(episode.response_logprobs)
    trained = torch.tensor(episode.loss_mask)
    assert torch.allclose(logp[0][trained], engine_lp[trained], atol=1e-5)  # parity over both turns
    packed, _, packed_mask = forward_responses(model, backend, episodes, forbidden, padding_free=True)
    assert torch.equal(packed_mask, mask)
    assert torch.allclose(packed[mask.bool()], logp[mask.bool()], atol=1e-5)


def test_mix_policy_replays_the_offline_trajectory_through_the_tool(setup: Any) -> None:
    """With mix-policy the group's last episode is the sample's offline trajectory: its call runs (the
    reply is the tool's, as for the policy's own calls) and its answer follows; its log-probs are
    unknown (NaN: the update recomputes them) and its call is not counted among the policy's."""
    backend, _, base = setup
    sample = Sample(id="s", data_type="video", problem="Which colour?", offline_output=CALL + ANSWER)
    prompt = Prompt(sample, base.require_encoded(), None)
    config = _config(enable_mix_policy=True)
    workflow = make_workflow(load_plugins(), "tool_agent", config)
    engine = ScriptedEngine(backend, setup[1], [ANSWER])  # the policy answers without a call
    groups, metrics = workflow.rollout(config, [prompt], engine, _scorer, backend, seed=0, first_group=2)
    online, offline = groups[0]
    assert not online.offline and online.tool_calls == [] and len(online.segments) == 1
    assert offline.offline and offline.group == 2 and offline.reward == 1.0
    call, obs, answer = offline.segments
    assert [s.trained for s in offline.segments] == [True, False, True]
    end = [backend.end_of_turn_id()]
    assert call.token_ids == [*backend.tokenizer.encode(CALL, add_special_tokens=False), *end]
    assert answer.token_ids == [*backend.tokenizer.encode(ANSWER, add_special_tokens=False), *end]
    assert obs.media == ("video:frames=4,5,7,8",)  # the tool's reply to the offline call
    assert offline.tool_calls == [ToolCallRecord("get_frames", {"start": 2, "end": 4, "n": 4}, 1, False, 4)]
    assert not offline.has_engine_logprobs and offline.completion.finish_reason == "stop"
    assert metrics["tool/turns_per_episode"] == 1.0 and "tool/calls/get_frames" not in metrics
    assert metrics["mix_policy/offline_replaced_groups"] == 1.0


class FirstTurnScripted(ScriptedEngine):
    """The scripted call first, then the HF engine generates from the whole context (reply included)."""

    def __init__(self, backend: Any, model: Any) -> None:
        super().__init__(backend, model, [CALL])
        self.hf = HFEngine(backend, model)

    def generate(self, prompts: Sequence[EncodedPrompt], params: SamplingParams) -> list[list[Completion]]:
        first = [p.prompt_ids.count(self.start) == 3 for p in prompts]
        if all(first):
            return super().generate(prompts, params)
        assert not any(first)
        return self.hf.generate(prompts, params)


def test_the_hf_engine_continues_after_a_video_reply_with_the_actors_log_probs(setup: Any) -> None:
    backend, model, prompt = setup
    config = _config(max_turns=2, temperature=1.0)
    config.rollout.max_response_length = 160
    workflow = make_workflow(load_plugins(), "tool_agent", config)
    engine = FirstTurnScripted(backend, model)
    groups, _ = workflow.rollout(config, [prompt], engine, _scorer, backend, seed=3)
    forbidden = sorted(backend.forbidden_token_ids())
    logp, _, mask = forward_responses(model, backend, groups[0], forbidden)
    for row, episode in enumerate(groups[0]):
        assert [s.trained for s in episode.segments] == [True, False, True]
        assert episode.segments[1].media == ("video:frames=4,5,7,8",)
        trained = torch.tensor(episode.loss_mask)
        engine_lp = torch.tensor(episode.response_logprobs)
        assert mask[row, : len(trained)].bool().tolist() == trained.tolist()
        assert torch.allclose(logp[row, : len(trained)][trained], engine_lp[trained], atol=1e-4)


def test_bad_calls_are_observations_and_budgets_end_episodes(setup: Any) -> None:
    backend = setup[0]
    bad = '<tool_call>{"name": "get_frames", "arguments": {"start": 6, "end": 1, "n": 4}}</tool_call>'
    episodes, metrics, _ = _run(setup, [bad, CALL], max_turns=2)
    _, obs, _ = episodes[0].segments
    assert "Error: end (1 s) must come after start (6 s)" in backend.tokenizer.decode(obs.token_ids)
    assert obs.observation is not None and not obs.observation.visual and not obs.media
    assert metrics["tool/invalid_calls"] == 2.0 and metrics["tool/end/max_turns"] == 2.0
    assert episodes[0].completion.finish_reason == "max_turns"
    assert episodes[0].response_input() == episodes[0].response_ids  # text only: plain ids

    episodes, metrics, _ = _run(setup, [CALL, ANSWER], max_visual_tokens=7)  # the reply needs 8
    assert len(episodes[0].segments) == 1 and metrics["tool/end/visual_tokens"] == 2.0
    assert episodes[0].completion.finish_reason == "visual_tokens" and "tool/frames" not in metrics

    call_ids = len(backend.tokenizer.encode(CALL)) + 1
    episodes, metrics, _ = _run(setup, [CALL, ANSWER], max_response_length=call_ids + 20)
    assert len(episodes[0].segments) == 1  # the reply (> 20 tokens with its video) is never cut
    assert episodes[0].completion.finish_reason == "length" and metrics["tool/end/length"] == 2.0


def test_setup_names_unknown_tools_and_refuses_a_baseline(setup: Any) -> None:
    with pytest.raises(
        ConfigError, match="rollout.tools: unknown tool 'get_frame'. Did you mean 'get_frames'"
    ):
        make_workflow(load_plugins(), "tool_agent", _config(tools=["get_frame"]))
    with pytest.raises(ConfigError, match="needs at least one tool"):
        make_workflow(load_plugins(), "tool_agent", _config(tools=[]))
    backend, _, prompt = setup
    with pytest.raises(ConfigError, match="no greedy baseline"):
        ToolAgent().rollout(
            _config(), [prompt], ScriptedEngine(backend, None, []), _scorer, backend, seed=0, baseline=True
        )


class SearchReward:
    """Half for the answer B, half for grounding: a valid get_frames call whose window holds t = 3 s."""

    def __call__(self, inp: RewardInput) -> RewardOutput:
        accuracy = float("<answer>B</answer>" in inp.response)
        grounded = any(
            c.name == "get_frames" and not c.invalid and c.arguments["start"] <= 3 <= c.arguments["end"]
            for c in inp.tool_calls
        )
        parts = {"accuracy": accuracy, "grounding": float(grounded)}
        return RewardOutput(0.5 * accuracy + 0.5 * grounded, parts)


def test_the_reward_reads_the_episodes_calls_and_the_config_weights_calls(setup: Any) -> None:
    """An invalid call, a valid one, the answer: the reward plugin sees both calls (name, arguments,
    turn, invalid, frames) and the config's per-call cost and invalid-call penalty are subtracted."""
    backend, model, base = setup
    sample = Sample(id="s", data_type="video", problem="Which?", problem_type="search", ground_truth="B")
    prompt = Prompt(sample, base.encoded, None)
    bad = '<tool_call>{"name": "get_frames", "arguments": {"start": 6, "end": 1, "n": 4}}</tool_call>'
    config = _config(max_turns=3)
    workflow = make_workflow(load_plugins(), "tool_agent", config)
    rewards = RewardConfig(tool_call_cost=0.1, invalid_call_penalty=0.25)
    scorer = local_scorer(RewardRouter.of({"search": SearchReward()}, config=rewards), backend)
    engine = ScriptedEngine(backend, model, [bad, CALL, ANSWER])
    ((episode, _),), _ = workflow.rollout(config, [prompt], engine, scorer, backend, seed=0)
    assert episode.tool_calls == [
        ToolCallRecord(
            "get_frames",
            {"start": 6, "end": 1, "n": 4},
            turn=1,
            invalid=True,
            frames=0,
            reason="Error: end (1 s) must come after start (6 s)",
        ),
        ToolCallRecord("get_frames", {"start": 2, "end": 4, "n": 4}, turn=2, invalid=False, frames=4),
    ]
    # 0.5·1 + 0.5·1 for answer and grounding, − 2 calls × 0.1, − 1 invalid × 0.25
    assert episode.reward == pytest.approx(0.55)
    assert episode.parts == pytest.approx(
        {"accuracy": 1.0, "grounding": 1.0, "tool_call_cost": -0.2, "invalid_call_penalty": -0.25}
    )
    step = step_metrics([episode])
    assert step["parts/search/tool_call_cost"] == pytest.approx(-0.2)
    assert step["parts/search/invalid_call_penalty"] == pytest.approx(-0.25)

    plain = local_scorer(RewardRouter.of({"search": SearchReward()}), backend)  # weights 0: unchanged
    plain([episode])
    assert episode.reward == 1.0 and episode.parts == {"accuracy": 1.0, "grounding": 1.0}
    with pytest.raises(ConfigError, match="rewards.tool_call_cost must be a finite number >= 0, got -0.1"):
        load_rewards({"tool_call_cost": -0.1})


def test_rows_choose_their_workflow_in_one_batch(setup: Any) -> None:
    """A single-turn row and a tool_agent row (spelled as the registry normalises it) in one batch of a
    single_turn run: each is rolled out by its workflow, the groups come back in prompt order with
    their ids; an unknown or mistyped row workflow is an error naming the row."""
    backend, model, base = setup
    plugins, config = load_plugins(), _config()
    rows = [
        Sample(id="plain", data_type="video", problem="Which?", origin="d.jsonl:1"),
        Sample(id="agent", data_type="video", problem="Which?", origin="d.jsonl:2", workflow="Tool-Agent"),
    ]
    workflow: Any = row_workflows(plugins, config, make_workflow(plugins, "single_turn", config), rows)
    assert rows[1].workflow == "tool_agent"
    prompts = [Prompt(row, base.encoded, None) for row in rows]
    engine = ScriptedEngine(backend, model, [CALL, ANSWER])
    groups, metrics = workflow.rollout(config, prompts, engine, _scorer, backend, seed=0, first_group=5)
    (plain, _), (agent, _) = groups
    assert (plain.prompt.sample.id, plain.group, plain.segments, plain.tool_calls) == ("plain", 5, [], [])
    assert (agent.prompt.sample.id, agent.group) == ("agent", 6)
    assert [s.trained for s in agent.segments] == [True, False, True] and len(agent.tool_calls) == 1
    assert metrics["workflow/single_turn"] == 1.0 and metrics["workflow/tool_agent"] == 1.0
    assert metrics["tool/calls/get_frames"] == 2.0 and metrics["tool/turns_per_episode"] == 2.0
    spec = tool_spec(workflow.workflows["tool_agent"].tools["get_frames"])
    assert workflow.prompt_tools(rows[1]) == [spec] and workflow.prompt_tools(rows[0]) == []

    same = [Sample(id="a", data_type="video", problem="q", workflow="single_turn")]
    single = SingleTurn()
    assert row_workflows(plugins, config, single, same) is single  # no other workflow: the run's own
    bad = [Sample(id="x", data_type="video", problem="q", origin="d.jsonl:3", workflow="tool_agnet")]
    with pytest.raises(
        DataError,
        match=r"^d.jsonl:3 \(sample 'x'\): workflow: unknown rollout workflow 'tool_agnet'. "
        r"Did you mean 'tool_agent'\? Registered: single_turn, tool_agent.",
    ):
        row_workflows(plugins, config, workflow, bad)
    with pytest.raises(DataError, match=r"^d.jsonl:4: workflow must be a workflow's name .*got 3"):
        parse_row(
            {"problem": "q", "answer": "a", "workflow": 3}, "d.jsonl:4", media_root=Path(), default_id=""
        )


TOOLS_TEMPLATE = (  # a template that renders tools= itself (as Qwen2.5's and Qwen3-VL's do)
    "{% if tools %}<|im_start|>system\nTOOLS:{% for t in tools %}{{ t['function']['name'] }};{% endfor %}"
    "<|im_end|>\n{% endif %}"
)


def test_the_prompt_offers_the_tools_in_the_system_turn(setup: Any) -> None:
    """A prompt with tools: the tiny Qwen2.5-VL template ignores ``tools=``, so the backend writes Qwen's
    ``# Tools`` block into the system turn; a template that renders ``tools=`` renders them itself."""
    backend, _, base = setup
    agent: Any = make_workflow(load_plugins(), "tool_agent", _config())
    spec = tool_spec(agent.tools["get_frames"])
    video = base.require_encoded().prompt.videos[0]
    encoded = backend.encode(PromptInput("s", "Which colour?", videos=[video], tools=[spec]))
    text = backend.tokenizer.decode(encoded.prompt_ids)
    system = (
        "<|im_start|>system\nYou are a helpful assistant.\n\n# Tools\n\nYou may call one or more functions "
        "to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> "
        'XML tags:\n<tools>\n{"type": "function", "function": {"name": "get_frames", "description": '
    )
    assert text.startswith(system), text[:400]
    assert text.count("<tools>\n") == 1 and '"required": ["start", "end", "n"]' in text
    assert (
        "</tools>\n\nFor each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
        "<args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\n<|vision_start|>"
    ) in text
    plain = backend.encode(PromptInput("s", "Which colour?", videos=[video]))
    assert encoded.video_grid_thw == plain.video_grid_thw  # the media are the prompt's, after the block

    original = backend.tokenizer.chat_template
    backend.tokenizer.chat_template = TOOLS_TEMPLATE + original
    try:
        ids = backend.encode(PromptInput("s", "Which colour?", videos=[video], tools=[spec])).prompt_ids
        assert backend.tokenizer.decode(ids).startswith("<|im_start|>system\nTOOLS:get_frames;<|im_end|>")
    finally:
        backend.tokenizer.chat_template = original


@pytest.mark.slow
def test_a_training_step_runs_the_tool_agent_from_the_config(tmp_path: Path) -> None:
    """The wiring: ``rollout.workflow: tool_agent`` with the hf engine through build_training (the
    composition root resolves the tools, the parity gate passes, ``tool/*`` reach metrics.jsonl); the
    random tiny model writes no call, so every episode is one turn. Decoding windows the cache cannot
    hold (``tool_frames: decode`` with ``source_mode: preprocessed_only``) is refused by name."""
    from videorl import demo
    from videorl.config import load_config
    from videorl.runs.history import read_metrics
    from videorl.train.compose import build_training

    model, train, val = demo.prepare(tmp_path, load_plugins(), family="qwen2_5_vl", seed=0, train=4, val=2)
    base = demo.demo_overrides(tmp_path, model, train, val, steps=1, seed=3, engine="hf")
    overrides = [
        *base, f"output_dir={tmp_path / 'run'}", "data.rollout_batch_size=2", "actor.global_batch_size=2",
        "rollout.n=2", "trainer.progress_bar=false", "rollout.workflow=tool_agent",
        "rollout.tools=[get_frames,seek,zoom]", "rollout.max_response_length=24",
        "data.max_prompt_length=2048",  # the tools' descriptions in the system turn
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="rollout.tool_frames: decode .* set data.source_mode to prefer_"):
        build_training(load_config(None, [*overrides, "rollout.tool_frames=decode"]), load_plugins())
    config = load_config(None, overrides)  # the demo's mix-policy: its offline answers are single turns
    assert build_training(config, load_plugins()).run() == 1
    (row,) = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert (
        row["tool/turns_per_episode"] == 1.0 and row["tool/end/length"] + row.get("tool/end/answer", 0) == 4
    )
    assert row["rollout/logprob_diff"] < 1e-5


def test_ray_refuses_mixed_row_workflows_and_a_tool_agent_baseline_before_it_starts() -> None:
    """Ray's workers run single_turn or tool_agent as the run's one workflow: a dataset mixing
    workflows, and ReMax's greedy baseline with tool_agent, are refused before Ray starts, saying why
    and what to do, and output_dir is released; a tool_agent run passes."""
    from types import SimpleNamespace

    from videorl.cluster.launch import _refuse_local_only
    from videorl.rollout.per_row import PerRowWorkflow

    mixed = PerRowWorkflow("single_turn", {"single_turn": SingleTurn(), "tool_agent": ToolAgent()})
    cases = [
        (mixed, False, "rollout.workflow 'single_turn+tool_agent' (the run's or its rows') runs in one "
         "process or under torchrun; on Ray the workers run single_turn or tool_agent as the run's one "
         "workflow so far (rows may not mix workflows): train without --ray"),
        (ToolAgent(), True, "rollout.workflow tool_agent makes no greedy baseline (ReMax): choose another "
         "estimator"),
        (ToolAgent(), False, None),
    ]  # fmt: skip
    for workflow, baseline, message in cases:
        released: list[bool] = []
        parts: Any = SimpleNamespace(
            workflow=workflow,
            benchmarks=SimpleNamespace(agents={}),
            start=SimpleNamespace(release=lambda released=released: released.append(True)),
            algorithm=SimpleNamespace(greedy_baseline=baseline),
        )
        if message is None:
            _refuse_local_only(_config(), parts)
            assert released == []
            continue
        with pytest.raises(ConfigError) as error:
            _refuse_local_only(_config(), parts)
        assert str(error.value) == message
        assert released == [True]


def _agent_episode(setup: Any) -> tuple[Episode, Prompt, TrainConfig]:
    """A scored-looking episode of three turns: an invalid call (a text reply), a valid get_frames call
    (a video reply), the answer; with its calls."""
    backend, model, base = setup
    bad = '<tool_call>{"name": "get_frames", "arguments": {"start": 6, "end": 1, "n": 4}}</tool_call>'
    sample = Sample(id="s", data_type="video", problem="Which?", videos=["clip.mp4"])
    prompt = Prompt(sample, base.encoded, None)
    config = _config(max_turns=3)
    workflow = make_workflow(load_plugins(), "tool_agent", config)
    engine = ScriptedEngine(backend, model, [bad, CALL, ANSWER])
    ((episode, _),), _ = workflow.rollout(config, [prompt], engine, _scorer, backend, seed=0)
    return episode, prompt, config


def test_an_agent_episode_crosses_the_ray_wire_and_the_actor_rebuilds_its_replies(setup: Any) -> None:
    """Encoded where it was rolled out, sent as bytes, decoded and rebuilt on an actor worker from the
    prompt's frames (its own cache): the same segments (tokens, log-probs with NaN for the replies, loss
    mask, media), calls, ending and offline flag, and the replies' observations re-encoded to the same
    tokens and video grids; the message holds no pixels."""
    from videorl.cluster import wire
    from videorl.cluster.episode_wire import Limits, attach_observations, episode_in, episode_out

    backend, _, _ = setup
    episode, prompt, config = _agent_episode(setup)
    data = wire.dumps(episode_out(episode, config.rollout.max_frames_per_call))
    assert len(data) < 4 * 3 * 56 * 56 / 4  # ids, log-probs, two requests: a quarter of its 4 frames
    got = episode_in(prompt, episode.group, wire.loads(data), Limits.of(config))
    assert all(s.observation is None for s in got.segments)  # the controller holds no frames
    agent: Any = make_workflow(load_plugins(), "tool_agent", config)
    attach_observations(got, lambda request: agent.rebuild_reply(config, backend, prompt, request))
    assert [s.trained for s in got.segments] == [True, False, True, False, True]
    for mine, theirs in zip(got.segments, episode.segments, strict=True):
        assert (mine.token_ids, mine.media, mine.request) == (theirs.token_ids, theirs.media, theirs.request)
        assert torch.equal(
            torch.tensor(mine.logprobs).nan_to_num(9.0), torch.tensor(theirs.logprobs).nan_to_num(9.0)
        )
        if theirs.observation is not None:
            assert mine.observation is not None
            assert mine.observation.prompt_ids == theirs.observation.prompt_ids
            assert mine.observation.video_grid_thw == theirs.observation.video_grid_thw
    assert got.segments[3].observation.video_grid_thw == [(2, 4, 4)]  # type: ignore[union-attr]
    assert got.loss_mask == episode.loss_mask and got.tool_calls == episode.tool_calls
    assert (got.completion, got.offline, got.group) == (episode.completion, False, episode.group)
    a = backend.collate([prompt.require_encoded()], [got.response_input()])
    b = backend.collate([prompt.require_encoded()], [episode.response_input()])
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.pixel_values_videos, b.pixel_values_videos)


def test_a_malformed_episode_message_is_refused_naming_the_field(setup: Any) -> None:
    from videorl.cluster.episode_wire import EpisodeMessageError, Limits, episode_in, episode_out

    episode, prompt, config = _agent_episode(setup)
    good = episode_out(episode, config.rollout.max_frames_per_call)
    limits = Limits.of(config)

    def refused(edit: Callable[[dict[str, Any]], None], field: str) -> None:
        import copy

        message = copy.deepcopy(good)
        edit(message)
        with pytest.raises(EpisodeMessageError, match=rf"^sample 's': episode message field {field}"):
            episode_in(prompt, 0, message, limits)

    refused(lambda m: m["segments"][0].__setitem__(1, "ids"), r"segments\[0\].token_ids: expected list")
    refused(lambda m: m["segments"][2][1].append(7), r"segments\[2\]: \d+ token ids but \d+ log-probs")
    refused(lambda m: m["segments"][0][1].__setitem__(0, -1), r"segments\[0\].token_ids\[0\]: -1 is outside")
    refused(
        lambda m: m["segments"][0][1].extend([1] * 600),
        r"segments\[0\].token_ids: \d+ entries, more than 512",
    )
    refused(lambda m: m["segments"][3][4].__setitem__("frames", 10**9), r"segments\[3\].request.frames")
    refused(lambda m: m["segments"][3][4].__setitem__("video", "/etc/passwd"), r"segments\[3\].request.video")
    refused(
        lambda m: m["segments"][3][4].__setitem__("arguments", {"x": "y" * 5000}),
        r"segments\[3\].request.arguments",
    )
    refused(lambda m: m["segments"][1].__setitem__(4, None), r"segments\[1\].request: a tool reply needs")
    refused(lambda m: m["segments"].extend(m["segments"] * 3), r"segments: \d+ entries, more than 6")
    refused(lambda m: m.__setitem__("end", "exploded"), r"end: 'exploded' is not one of")
    refused(lambda m: m["calls"][0].__setitem__(2, True), r"calls\[0\].turn: expected int, got bool")
    refused(lambda m: m.pop("offline"), r"\(episode\): keys")


def test_a_reply_the_actor_re_encodes_otherwise_is_refused(setup: Any) -> None:
    """An actor worker whose frames give the reply other tokens (another cache, a changed tool) stops
    with the sample and the segment named, rather than training on a misaligned episode."""
    from dataclasses import replace

    from videorl.cluster.episode_wire import (
        EpisodeMessageError,
        Limits,
        attach_observations,
        episode_in,
        episode_out,
    )

    backend, _, _ = setup
    episode, prompt, config = _agent_episode(setup)
    got = episode_in(prompt, 0, episode_out(episode, config.rollout.max_frames_per_call), Limits.of(config))
    agent: Any = make_workflow(load_plugins(), "tool_agent", config)

    def other_text(request: Any) -> Any:
        return agent.rebuild_reply(config, backend, prompt, replace(request, text=request.text + "!"))

    with pytest.raises(
        EpisodeMessageError, match=r"^sample 's': episode message field segments\[1\].token_ids"
    ):
        attach_observations(got, other_text)
    with pytest.raises(ValueError, match="showed 4 frame.s. where it was rolled out and 0 here"):
        agent.rebuild_reply(
            config,
            backend,
            prompt,
            replace(got.segments[3].request, arguments={"start": 9, "end": 10, "n": 4}),
        )
