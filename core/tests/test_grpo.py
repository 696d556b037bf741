"""The training loop's pieces with a fake engine, scorer and model: milliseconds, no checkpoint.

A per-token model (embedding then head, no mixing across positions) makes every response's log-probs
independent of what else is in its micro-batch, so the only thing micro-batching and ranks can change
is how the loss is normalised, which is what these tests pin down.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from videorl.actor.policy import Actor
from videorl.actor.update import forward_responses, micro_batches, update
from videorl.config import TrainConfig, load_config
from videorl.data import Sample
from videorl.encoding import Prompt
from videorl.episode import Episode, Segment
from videorl.errors import ConfigError
from videorl.model_inputs import EncodedPrompt, ModelInputs, PromptInput, collate_encoded
from videorl.parallel import Parallel, mean_over_ranks
from videorl.rollout import Completion
from videorl.rollout.collect import Rollout, collect_groups, rollout_seed
from videorl.rollout.single_turn import rollout_groups
from videorl.timing import StageTimer
from videorl.train.step import assign_advantages

VOCAB = 11


class TokenModel(torch.nn.Module):
    """Logits of each position from its own token only."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, 6)
        self.head = torch.nn.Linear(6, VOCAB)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int = 0,
                use_cache: bool | None = None) -> Any:  # fmt: skip
        logits = self.head(self.embed(input_ids))
        return SimpleNamespace(logits=logits[:, -logits_to_keep:] if logits_to_keep else logits)


class FakeBackend:
    family = "fake"

    def forbidden_token_ids(self) -> set[int]:
        return set()

    def collate(
        self, encoded: Sequence[EncodedPrompt], responses: Sequence[Sequence[int]] | None = None
    ) -> ModelInputs:
        return collate_encoded(encoded, pad_token_id=0, responses=responses)


def config(*overrides: str) -> TrainConfig:
    return load_config(None, ["model.path=/m", "data.train_files=[/d.jsonl]", "rollout.n=2",
                              "optim.grad_clip=null", *overrides])  # fmt: skip


def trajectory(sid: str, prompt: list[int], response: list[int], advantage: float, group: int = 0) -> Episode:
    sample = Sample(id=sid, data_type="text", problem="q", problem_type="fake", ground_truth="1")
    encoded = EncodedPrompt(sid, prompt, None, {}, prompt, PromptInput(sid, "q"))
    completion = Completion(response, [-1.0] * len(response), "stop")
    return Episode(Prompt(sample, encoded, None), group, completion, advantage=advantage)


def batch() -> list[Episode]:
    """Two groups of two; responses of 1 to 5 tokens, so the token-mean weighs them unequally."""
    return [
        trajectory("a", [1, 2, 3], [4, 5], 1.0, 0),
        trajectory("a", [1, 2, 3], [6], -1.0, 0),
        trajectory("b", [7], [8, 9, 10, 2, 3], 0.5, 1),
        trajectory("b", [7], [1, 1, 1], -0.5, 1),
    ]


def actor(lr: float = 0.1) -> Actor:
    model = TokenModel()
    return Actor(model, torch.optim.SGD(model.parameters(), lr=lr), FakeBackend())  # type: ignore[arg-type]


def params(a: Actor) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in a.model.parameters()])


class TwoRanks(Parallel):
    """One rank of two: sums include the other rank's ``counts`` (what all_reduce would return)."""

    def __init__(self, rank: int, other_counts: torch.Tensor, other_micro_batches: int) -> None:
        super().__init__(rank=rank, world_size=2)
        self.other_counts, self.other_micro_batches = other_counts, other_micro_batches

    def all_reduce(self, value: torch.Tensor, op: str = "sum") -> torch.Tensor:
        if op == "max":
            return torch.maximum(value, torch.tensor(self.other_micro_batches))
        return value + self.other_counts


def test_the_loss_is_the_token_mean_and_does_not_depend_on_micro_batching() -> None:
    start = actor()
    assert [len(b) for b in micro_batches(batch(), 6, Parallel())] == [1, 1, 1, 1]
    results = []
    for budget in (10_000, 6):  # one micro-batch, then one per trajectory
        a = copy.deepcopy(start)
        cfg = config(f"actor.max_tokens_per_micro_batch={budget}")
        metrics = update(
            cfg,
            a,
            built(cfg),
            batch(),
            Parallel(),
            StageTimer(),
        )
        results.append((metrics, params(a)))
    (one, p_one), (many, p_many) = results
    # one optimizer step from the same weights: ratio 1, so the loss is -sum(A · |response|) / tokens
    expected = -(1.0 * 2 + (-1.0) * 1 + 0.5 * 5 + (-0.5) * 3) / 11
    assert one["actor/loss"] == pytest.approx(expected, abs=1e-6)
    assert many["actor/loss"] == pytest.approx(expected, abs=1e-6)
    assert one["tokens/step"] == many["tokens/step"] == 3 + 2 + 3 + 1 + 1 + 5 + 1 + 3
    assert not torch.equal(p_one, params(start))  # the step moved the weights ...
    torch.testing.assert_close(p_many, p_one, atol=1e-6, rtol=0)  # ... the same way either way


def test_two_ranks_step_as_one_rank_on_the_whole_batch() -> None:
    """FSDP averages the ranks' gradients: each rank's loss divides by the tokens of all ranks over the
    world size, so the average of the two ranks' steps is the one-rank step on both halves."""
    start, trajectories = actor(lr=1.0), batch()
    whole = copy.deepcopy(start)
    update(config(), whole, built(config()), trajectories, Parallel(), StageTimer())

    halves = [trajectories[:2], trajectories[2:]]
    counts = [
        torch.tensor([float(sum(len(t.completion.token_ids) for t in h)), float(len(h))]) for h in halves
    ]
    deltas = []
    for rank, half in enumerate(halves):
        a = copy.deepcopy(start)
        update(config(), a, built(config()), half, TwoRanks(rank, counts[1 - rank], 1), StageTimer())
        deltas.append(params(a) - params(start))
    averaged = params(start) + (deltas[0] + deltas[1]) / 2
    torch.testing.assert_close(averaged, params(whole), atol=1e-6, rtol=0)


def test_every_rank_runs_as_many_micro_batches_as_the_busiest() -> None:
    trajectories = batch()[:2]  # 5 + 4 tokens: one micro-batch of budget 100 here
    assert len(micro_batches(trajectories, 100, Parallel())) == 1
    padded = micro_batches(trajectories, 100, TwoRanks(0, torch.zeros(2), 2))
    assert len(padded) == 2 and sorted(len(b) for b in padded) == [1, 1]  # the collective counts match


def test_mean_over_ranks_averages_each_metric_over_the_ranks_that_report_it() -> None:
    per_rank = [{"loss": 1.0, "reward/math": 0.5}, {"loss": 3.0}, {"loss": 2.0, "reward/math": 1.0}]
    assert mean_over_ranks(per_rank) == {"loss": 2.0, "reward/math": 0.75}


class FakeData:
    """Samples s0, s1, ... in order, as ``TrainData.take`` hands them out."""

    def __init__(self) -> None:
        self.next = 0

    def take(self, count: int) -> list[Sample]:
        out = [Sample(id=f"s{i}", data_type="text", problem="q") for i in range(self.next, self.next + count)]
        self.next += count
        return out


def fake_rollout(rewards: dict[str, list[float]], seeds: list[int]) -> Rollout:
    """A fake engine and scorer in one: each sample's group gets the rewards listed for it."""

    def rollout(
        samples: list[Sample], seed: int, first_group: int
    ) -> tuple[list[list[Episode]], dict[str, float]]:
        seeds.append(seed)
        groups = []
        for g, s in enumerate(samples):
            group = [trajectory(s.id, [1], [2], 0.0, first_group + g) for _ in rewards[s.id]]
            for t, r in zip(group, rewards[s.id]):
                t.reward = r
            groups.append(group)
        return groups, {"mix/replaced": 1.0}

    return rollout


REWARDS = {
    "s0": [1.0, 1.0],
    "s1": [0.0, 1.0],
    "s2": [0.0, 0.0],
    "s3": [1.0, 0.0],
    "s4": [0.5, 0.5],
    "s5": [0.5, 0.5],
}


def test_collect_groups_without_dynamic_sampling_keeps_every_group() -> None:
    seeds: list[int] = []
    groups, metrics = collect_groups(config(), 3, 2, FakeData(), fake_rollout(REWARDS, seeds))  # type: ignore[arg-type]
    assert [g[0].prompt.sample.id for g in groups] == ["s0", "s1"] and metrics == {"mix/replaced": 1.0}
    assert seeds == [rollout_seed(config(), 3, 0, 0)]


def test_dynamic_sampling_drops_flat_groups_and_refills_from_the_data() -> None:
    seeds: list[int] = []
    cfg = config("algorithm.dynamic_sampling=true", "algorithm.dynamic_sampling_max_tries=3")
    groups, metrics = collect_groups(cfg, 1, 2, FakeData(), fake_rollout(REWARDS, seeds), rank=1)  # type: ignore[arg-type]
    # round 1: s0 flat, s1 kept; round 2 (one more sample): s2 flat; round 3: s3 kept
    assert [g[0].prompt.sample.id for g in groups] == ["s1", "s3"]
    assert [g[0].group for g in groups] == [1, 1]  # numbered from the groups already kept
    assert metrics == {
        "mix/replaced": 3.0,
        "dynamic_sampling/dropped_groups": 2.0,
        "dynamic_sampling/rounds": 3.0,
    }
    assert seeds == [rollout_seed(cfg, 1, attempt, 1) for attempt in range(3)] and len(set(seeds)) == 3


def test_dynamic_sampling_fills_with_dropped_groups_when_the_tries_run_out() -> None:
    cfg = config("algorithm.dynamic_sampling=true", "algorithm.dynamic_sampling_max_tries=1")
    data = FakeData()
    data.next = 4  # s4, s5: both flat
    groups, metrics = collect_groups(cfg, 0, 2, data, fake_rollout(REWARDS, []))  # type: ignore[arg-type]
    assert [g[0].prompt.sample.id for g in groups] == ["s4", "s5"]
    assert metrics["dynamic_sampling/dropped_groups"] == 2.0 and metrics["dynamic_sampling/rounds"] == 1.0


def test_group_advantages_are_normalised_within_each_group() -> None:
    groups = [
        [trajectory("a", [1], [2], 0.0) for _ in range(2)],
        [trajectory("b", [1], [2], 0.0) for _ in range(2)],
    ]
    for t, r in zip([*groups[0], *groups[1]], [1.0, 0.0, 0.5, 0.5]):
        t.reward = r
    flat = assign_advantages(
        config("algorithm.norm_adv_by_std=true"), built(config("algorithm.norm_adv_by_std=true")), groups
    )
    std = math.sqrt(0.5)  # sample std of (1, 0)
    assert [t.advantage for t in flat] == pytest.approx([0.5 / std, -0.5 / std, 0.0, 0.0], rel=1e-4)


PINNED_ADVANTAGES = [
    "0x1.6a09c40000000p-1",
    "-0x1.6a09c40000000p-1",
    "-0x1.6a09ba0000000p-1",
    "0x1.6a09ba0000000p-1",
]
PINNED_LOSS = "0x1.21b0a00000000p-8"
PINNED_CLIP_FRACTION = "0x1.745d1745d1746p-3"  # 2 of 11 tokens
PINNED_WEIGHT_SUM = "0x1.33f5ee8600000p+2"
PINNED_WEIGHT_SQ = "0x1.30ac269813f83p+6"


def pinned_step(*overrides: str) -> tuple[list[float], dict[str, float], torch.Tensor]:
    """GRPO's advantages and two optimizer steps (so the second sees ratios off 1, some clipped) on a
    fixed batch: what the pinning test below compares, bit for bit, with the numbers of the loop before
    algorithms became components."""
    trajectories = batch()
    groups = [trajectories[:2], trajectories[2:]]
    for t, r in zip(trajectories, [1.0, 0.0, 0.25, 1.0]):
        t.reward = r
        t.parts = {"accuracy": float(r == 1.0), "format": r}  # what GDPO normalises one by one
    cfg = config("data.rollout_batch_size=2", "actor.global_batch_size=1", "rollout.n=2", *overrides)
    flat = assign_advantages(cfg, built(cfg), groups)
    a = actor(lr=2.0)
    metrics = update(cfg, a, built(cfg), flat, Parallel(), StageTimer())
    return [t.advantage for t in flat], metrics, params(a)


def test_grpo_is_bit_for_bit_the_loop_before_algorithm_components() -> None:
    advantages, metrics, weights = pinned_step()

    # Recorded with the code of commit 0361d6a (grpo_advantages + policy_loss called by the loop), bit for
    # bit on the machine that recorded them; another CPU's float32 kernels round the forward differently
    # (4e-6 relative on the loss, measured on an AMD EPYC), so the comparison allows 1e-5. The loss is a
    # small difference of larger terms (4.4e-3): it gets 1e-7 absolute (6e-8 measured on an Intel Xeon).
    def close(value: float, pinned: str, absolute: float = 1e-9) -> bool:
        return value == pytest.approx(float.fromhex(pinned), rel=1e-5, abs=absolute)

    assert all(close(a, p) for a, p in zip(advantages, PINNED_ADVANTAGES, strict=True)), advantages
    assert close(metrics["actor/loss"], PINNED_LOSS, absolute=1e-7), metrics["actor/loss"]
    assert metrics["actor/clip_fraction"].hex() == PINNED_CLIP_FRACTION  # a count: exact everywhere
    assert close(float(weights.double().sum()), PINNED_WEIGHT_SUM)
    assert close(float((weights.double() ** 2).sum()), PINNED_WEIGHT_SQ)


ESTIMATORS = ["grpo", "rloo", "reinforce_pp", "gdpo"]
LOSSES = ["ppo_clip", "gspo", "cispo", "gmpo", "sapo"]


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("loss", LOSSES)
def test_every_estimator_runs_a_step_with_every_loss(estimator: str, loss: str) -> None:
    advantages, metrics, weights = pinned_step(
        f"algorithm.adv_estimator={estimator}", f"algorithm.policy_loss={loss}"
    )
    assert math.isfinite(metrics["actor/loss"]) and any(a != 0 for a in advantages)
    assert not torch.equal(weights, params(actor()))  # the step trained


def test_presets_change_the_numbers_and_dr_grpo_is_unnormalised() -> None:
    _, grpo_metrics, _ = pinned_step()
    dr_adv, dr_metrics, _ = pinned_step("algorithm.preset=dr_grpo", "rollout.max_response_length=8")
    # rewards (1, 0) and (0.25, 1): r - mean, no std division
    assert dr_adv == pytest.approx([0.5, -0.5, -0.375, 0.375])
    assert dr_metrics["actor/loss"] != grpo_metrics["actor/loss"]
    assert pinned_step("algorithm.preset=rloo")[0] == pytest.approx(
        [1.0, -1.0, -0.75, 0.75]
    )  # n/(n-1)·(r - mean)


@pytest.mark.parametrize("estimator", ["kl", "abs", "mse", "low_var_kl"])
def test_the_kl_term_is_reduced_as_the_loss_reduces_its_own(estimator: str) -> None:
    # advantages 0: the policy loss has no gradient, the step is the KL term's alone. With k1 against a
    # reference of 0 the term is Σ logp over the valid tokens divided by the mode's count: 11 tokens
    # (token-mean) or 4 responses (seq-mean-token-sum), so one SGD step moves the weights 11/4 as far.
    steps = []
    for mode in ("token-mean", "seq-mean-token-sum"):
        trajectories = batch()
        for t in trajectories:
            t.advantage, t.ref_logprobs = 0.0, [0.0] * len(t.response_ids)
        cfg = config("data.rollout_batch_size=2", "actor.global_batch_size=2", "algorithm.use_kl_loss=true",
                     "algorithm.kl_coef=1.0", f"algorithm.kl_penalty={estimator}",
                     f"algorithm.loss_options={{loss_agg_mode: {mode}}}")  # fmt: skip
        a, before = actor(), params(actor())
        metrics = update(cfg, a, built(cfg), trajectories, Parallel(), StageTimer())
        assert math.isfinite(metrics["actor/kl"]) and metrics["actor/kl"] != 0
        steps.append(params(a) - before)
    assert steps[0].abs().sum() > 0
    torch.testing.assert_close(steps[1], steps[0] * 11 / 4, rtol=1e-4, atol=1e-6)  # weights - weights


def test_overlong_shaping_lowers_the_reward_of_long_responses_before_the_estimator() -> None:
    groups = [[trajectory("a", [1], [2] * 2, 0.0), trajectory("a", [1], [2] * 8, 0.0)]]
    for t in groups[0]:
        t.reward = 1.0
    cfg = config(
        "rollout.max_response_length=8", "algorithm.overlong_buffer=4", "algorithm.adv_estimator=rloo"
    )
    flat = assign_advantages(cfg, built(cfg), groups)
    # shaped rewards 1 + 0 and 1 - 1 (8 tokens = the limit); RLOO: ±1; the logged rewards stay 1
    assert [t.advantage for t in flat] == pytest.approx([1.0, -1.0])
    assert [t.reward for t in flat] == [1.0, 1.0]


def test_overlong_filtering_leaves_truncated_responses_out_of_the_loss() -> None:
    trajectories = batch()
    truncated = trajectories[2]
    truncated.completion = Completion(truncated.completion.token_ids, truncated.completion.logprobs, "length")
    filtered = actor()
    m_filtered = update(
        config("algorithm.overlong_filtering=true"),
        filtered,
        built(config("algorithm.overlong_filtering=true")),
        trajectories,
        Parallel(),
        StageTimer(),
    )
    without = actor()
    rest = [t for t in trajectories if t is not truncated]
    m_without = update(config(), without, built(config()), rest, Parallel(), StageTimer())
    # ratio 1: -(1·2 - 1·1 - 0.5·3) / 6 tokens, the 5-token truncated response left out
    assert m_filtered["actor/loss"] == pytest.approx(-(2 - 1 - 1.5) / 6, abs=1e-6)
    assert m_without["actor/loss"] == pytest.approx(m_filtered["actor/loss"], abs=1e-7)
    torch.testing.assert_close(params(filtered), params(without), atol=1e-7, rtol=0)


def test_the_environment_s_tokens_of_a_multi_turn_episode_are_not_trained_on() -> None:
    """Episode ``a``: the policy wrote [4, 5], a tool replied [6, 7] (loss mask 0), the policy wrote [8].
    With ratio 1 the token-mean loss is -A over the 3 policy tokens, and the tool's tokens get no
    gradient: the update equals one on the same sequence where their advantage is 0."""
    nan = float("nan")
    episode = trajectory("a", [1, 2, 3], [], 1.0)
    episode.segments = [
        Segment([4, 5], [-1.0, -1.0]),
        Segment([6, 7], [nan, nan], trained=False),
        Segment([8], [-1.0]),
    ]
    a = actor()
    logp, _, mask = forward_responses(a.model, a.backend, [episode], [])
    assert mask.tolist() == [[1, 1, 0, 0, 1]] and logp.shape == (1, 5)
    metrics = update(config(), a, built(config()), [episode], Parallel(), StageTimer())
    assert metrics["actor/loss"] == pytest.approx(-1.0, abs=1e-6)
    assert metrics["rollout/logprob_diff"] >= 0  # compared on the policy's 3 tokens only


def test_dr_grpo_divides_the_loss_by_responses_times_the_length_limit() -> None:
    cfg = config("algorithm.preset=dr_grpo", "rollout.max_response_length=8")
    metrics = update(cfg, actor(), built(cfg), batch(), Parallel(), StageTimer())
    # ratio 1: -sum(A · |response|) / (4 responses × 8) = -(2 - 1 + 2.5 - 1.5) / 32, not / 11 tokens
    assert metrics["actor/loss"] == pytest.approx(-2 / 32, abs=1e-6)


@pytest.mark.parametrize(
    ("mode", "loss", "weight_mean", "changed"),
    [
        # response b0 (5 tokens, A = 0.5) has weight 3 on every token, the others 1; ratio 1, so
        # tis: -(1·2 - 1·1 + 0.5·5·2 - 0.5·3) / 11 (b0 truncated to 2); mis: b0 dropped (weight 0)
        ("tis", -(2 - 1 + 5 - 1.5) / 11, (2 + 1 + 10 + 3) / 11, "truncated_fraction"),
        ("mis", -(2 - 1 + 0 - 1.5) / 11, (2 + 1 + 0 + 3) / 11, "masked_fraction"),
    ],
)
def test_rollout_correction_weighs_the_advantages_and_logs_per_modality(
    mode: str, loss: float, weight_mean: float, changed: str
) -> None:
    a, trajectories = actor(), batch()
    for t in trajectories:  # the engine's log-probs: the trainer's, except 1/3 of the probability on b0
        logp = forward_responses(a.model, a.backend, [t], [])[0][0].detach()
        gap = math.log(3.0) if t is trajectories[2] else 0.0
        t.completion = Completion(t.completion.token_ids, (logp - gap).tolist(), "stop")
    cfg = config(f"algorithm.rollout_correction={mode}", "algorithm.rollout_correction_cap=2")
    metrics = update(cfg, a, built(cfg), trajectories, Parallel(), StageTimer())
    assert metrics["actor/loss"] == pytest.approx(loss, abs=1e-5)
    for suffix in ("", "/text"):  # the batch is all text
        assert metrics[f"rollout_correction/weight_mean{suffix}"] == pytest.approx(weight_mean, abs=1e-5)
        assert metrics[f"rollout_correction/{changed}{suffix}"] == pytest.approx(5 / 11)
    assert "rollout_correction/weight_mean/video" not in metrics


class GreedyAwareEngine:
    """Samples tokens 4, 5, ... (one per response); greedily (temperature 0) answers token 3."""

    def __init__(self) -> None:
        self.params: list[Any] = []

    def generate(self, prompts: Sequence[EncodedPrompt], params: Any) -> list[list[Completion]]:
        self.params.append(params)
        if params.temperature == 0:
            return [[Completion([3], [-0.5], "stop")] for _ in prompts]
        return [[Completion([4 + i], [-1.0], "stop") for i in range(params.n)] for _ in prompts]


def token_scorer(trajectories: Sequence[Episode]) -> None:
    for t in trajectories:
        t.reward = {3: 0.5, 4: 1.0, 5: 0.0}[t.completion.token_ids[0]]


def test_remax_generates_a_greedy_baseline_that_is_scored_but_not_trained_on() -> None:
    cfg = config("algorithm.preset=remax")
    engine = GreedyAwareEngine()
    prompts = [trajectory("a", [1, 2], [4], 0.0).prompt]
    assert built(cfg).greedy_baseline
    groups, _ = rollout_groups(cfg, prompts, engine, token_scorer, FakeBackend(), seed=0, baseline=True)  # type: ignore[arg-type]
    # the sampled pair, then one greedy response (n=1, temperature 0) marked as the baseline
    assert [(p.n, p.temperature) for p in engine.params] == [(2, 1.0), (1, 0)]
    assert [(t.completion.token_ids, t.baseline) for t in groups[0]] == [
        ([4], False),
        ([5], False),
        ([3], True),
    ]
    flat = assign_advantages(cfg, built(cfg), groups)
    assert [t.completion.token_ids for t in flat] == [[4], [5]]  # the baseline is left out of the update
    assert [t.advantage for t in flat] == pytest.approx([1.0 - 0.5, 0.0 - 0.5])
    metrics = update(cfg, actor(), built(cfg), flat, Parallel(), StageTimer())
    assert metrics["actor/loss"] == pytest.approx(-(0.5 - 0.5) / 2, abs=1e-6)  # ratio 1, one token each


def test_remax_without_baselines_is_an_error_not_a_silent_grpo() -> None:
    with pytest.raises(ConfigError, match="needs a greedy baseline response per prompt"):
        cfg = config("algorithm.adv_estimator=remax")
        assign_advantages(cfg, built(cfg), [batch()[:2]])


def built(cfg: Any) -> Any:
    """The run's algorithm, as the composition root builds it once (installed plugins)."""
    from videorl import algorithms
    from videorl.plugins import load_plugins

    return algorithms.build(cfg.algorithm, load_plugins())


def test_a_prompts_responses_share_a_micro_batch_where_the_budget_allows() -> None:
    """Two prompts of three responses each (5 tokens a row), mixed: a budget of 16 holds a whole
    group (the tower then runs once per prompt); at 10 a group is cut once, never scattered."""
    a, b = trajectory("a", [1, 2, 3], [4, 5], 0.0), trajectory("b", [7], [8, 9, 10, 2], 0.0)
    rows = [copy.copy(t) for t in (a, a, b, b, a, b)]  # episodes of a group share their Prompt
    whole = micro_batches(rows, 16, Parallel())
    assert [[t.prompt.sample.id for t in m] for m in whole] == [["a"] * 3, ["b"] * 3]
    cut = micro_batches(rows, 10, Parallel())
    assert [[t.prompt.sample.id for t in m] for m in cut] == [["a", "a"], ["a", "b"], ["b", "b"]]
    assert sorted(id(t) for m in cut for t in m) == sorted(id(t) for t in rows)
