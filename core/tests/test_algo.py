"""The algorithms' pieces against values worked out by hand (in the comments)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from videorl.algorithms.advantages import (
    grpo_advantages,
    reinforce_pp_advantages,
    remax_advantages,
    rloo_advantages,
)
from videorl.algorithms.formulas import (
    aggregate,
    cispo_loss,
    gspo_loss,
    informative_groups,
    kl_k3,
    mix_policy_decision,
    overlong_penalty,
    pack_by_token_budget,
    policy_loss,
    rollout_correction,
)
from videorl.model_inputs import entropy_from_logits, mask_logits, token_logprobs

LN = math.log


def close(actual: torch.Tensor | list, expected: list, atol: float = 1e-6) -> None:
    torch.testing.assert_close(
        torch.as_tensor(actual).double(), torch.tensor(expected).double(), atol=atol, rtol=0
    )


# --- advantages --------------------------------------------------------------------------------


def test_grpo_advantages_by_hand() -> None:
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 0.0, 0.0, 0.0], [0.1, 0.1, 0.1, 0.1]])
    adv = grpo_advantages(rewards, eps=1e-6)
    # group 0: mean 0.5, unbiased var (4 * 0.25) / 3 = 1/3, std 0.577350 -> ±0.5 / 0.577351 = ±0.866024
    assert adv[0].tolist() == pytest.approx([0.866024, -0.866024, -0.866024, 0.866024], abs=1e-5)
    # group 1: mean 0.25, var (0.5625 + 3 * 0.0625) / 3 = 0.25, std 0.5
    # -> 0.75 / 0.5 = 1.5, -0.25 / 0.5 = -0.5
    assert adv[1].tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-5)
    # group 2: all equal -> exactly 0 (not a rounding residue of the mean divided by eps)
    assert adv[2].tolist() == [0.0, 0.0, 0.0, 0.0]


def test_grpo_advantages_without_std_and_with_a_single_response() -> None:
    # mean only: [1, 0, 0, 1] - 0.5
    assert grpo_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0]]), norm_by_std=False)[0].tolist() == [
        0.5,
        -0.5,
        -0.5,
        0.5,
    ]
    # one response: no spread, advantage 0 (and no NaN from an unbiased std of one value)
    assert grpo_advantages(torch.tensor([[0.7]])).tolist() == [[0.0]]
    with pytest.raises(ValueError, match="groups, n"):
        grpo_advantages(torch.tensor([1.0, 0.0]))


def test_rloo_advantages_by_hand() -> None:
    # group (1, 0, 0.5): 1 - mean(0, 0.5) = 0.75; 0 - mean(1, 0.5) = -0.75; 0.5 - mean(1, 0) = 0
    out = rloo_advantages(torch.tensor([[1.0, 0.0, 0.5], [2.0, 2.0, 2.0]]))
    close(out, [[0.75, -0.75, 0.0], [0.0, 0.0, 0.0]])
    assert rloo_advantages(torch.tensor([[3.0], [1.0]])).tolist() == [[0.0], [0.0]]  # no other response


def test_remax_advantages_subtract_the_greedy_reward() -> None:
    # the last column is the greedy response's reward: 1 - 0.25, 0 - 0.25, and 0 for the greedy one
    close(
        remax_advantages(torch.tensor([[1.0, 0.0, 0.25], [0.5, 0.5, 0.5]])),
        [[0.75, -0.25, 0.0], [0.0, 0.0, 0.0]],
    )
    with pytest.raises(ValueError, match="greedy reward last"):
        remax_advantages(torch.tensor([[1.0]]))


def test_reinforce_plus_plus_whitens_over_the_batch_s_responses() -> None:
    rewards = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    # batch (1, 0, 1, 1): mean 0.75, unbiased std sqrt((3 · 0.25² + 0.75²) / 3) = 0.5
    out = reinforce_pp_advantages(rewards, eps=0.0)
    close(out, [[0.5, -1.5], [0.5, 0.5]])
    # baseline variant: centred per group (0.5, -0.5, 0, 0), mean 0, std sqrt(0.5 / 3)
    base = reinforce_pp_advantages(rewards, eps=0.0, group_baseline=True)
    s = math.sqrt(0.5 / 3)
    close(base, [[0.5 / s, -0.5 / s], [0.0, 0.0]])
    assert reinforce_pp_advantages(torch.ones(2, 2)).tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_overlong_penalty_by_hand() -> None:
    # limit 10, buffer 4: no penalty up to 6 tokens, then -(len - 6) / 4, -1 at the limit
    out = overlong_penalty(torch.tensor([5, 6, 8, 10]), 10, 4, factor=0.5)
    assert out.tolist() == pytest.approx([0.0, 0.0, -0.25, -0.5])
    assert overlong_penalty(torch.tensor([10]), 10, 0).tolist() == [0.0]  # off


def test_informative_groups_drops_groups_with_equal_rewards() -> None:
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.5], [0.0, 0.0, 0.1]])
    assert informative_groups(rewards).tolist() == [False, True, False, True]


# --- logits ------------------------------------------------------------------------------------


def test_mask_logits_returns_new_tensor_with_minus_inf() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    version = logits._version
    out = mask_logits(logits, [1, 3])
    assert out.tolist() == [[1.0, -math.inf, 3.0, -math.inf]]
    assert logits.tolist() == [[1.0, 2.0, 3.0, 4.0]] and logits._version == version
    assert mask_logits(logits, []).tolist() == logits.tolist()
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        mask_logits(logits, [4])


def test_token_log_probs_by_hand() -> None:
    # logits log([1, 2, 1]) -> probabilities [0.25, 0.5, 0.25]
    logits = torch.log(torch.tensor([[[1.0, 2.0, 1.0], [1.0, 2.0, 1.0]]]))
    labels = torch.tensor([[1, 0]])
    assert token_logprobs(logits, labels)[0].tolist() == pytest.approx([LN(0.5), LN(0.25)], abs=1e-6)
    # temperature 2 halves the logits: weights sqrt([1, 2, 1]) -> p1 = √2 / (2 + √2) = √2 - 1
    assert token_logprobs(logits, labels, temperature=2.0)[0, 0].item() == pytest.approx(
        LN(math.sqrt(2) - 1), abs=1e-6
    )
    # masking id 0 leaves [0, 2/3, 1/3]; a masked label gets -inf
    masked = mask_logits(logits, [0])
    assert token_logprobs(masked, labels)[0].tolist() == pytest.approx([LN(2 / 3), -math.inf], abs=1e-6)


def test_token_log_probs_matches_log_softmax() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 11, generator=gen)
    labels = torch.randint(0, 11, (2, 5), generator=gen)
    expected = torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(token_logprobs(logits, labels), expected)


def test_entropy_by_hand_with_masked_entries_and_finite_gradients() -> None:
    # probabilities [0.25, 0.25, 0.5]: H = 0.5 ln 4 + 0.5 ln 2 = 0.693147 + 0.346574 = 1.039721
    logits = torch.log(torch.tensor([[1.0, 1.0, 2.0]]))
    assert entropy_from_logits(logits).item() == pytest.approx(1.039721, abs=1e-6)
    # [0, ln 3, -inf]: p = [0.25, 0.75, 0]; H = 0.25 ln 4 + 0.75 ln(4/3) = 0.346574 + 0.215762 = 0.562335;
    # the -inf entry adds nothing (not NaN)
    leaf = torch.tensor([[0.0, LN(3), 5.0]], requires_grad=True)
    masked = mask_logits(leaf, [2])
    version = masked._version
    entropy = entropy_from_logits(masked)
    assert entropy.item() == pytest.approx(0.562335, abs=1e-6)
    assert masked._version == version  # nothing was modified in place
    entropy.sum().backward()
    # dH/dz_i = -p_i (ln p_i + H):
    # -0.25 (-1.386294 + 0.562335) = 0.205990, -0.75 (-0.287682 + 0.562335) = -0.205990
    assert leaf.grad is not None
    assert leaf.grad[0].tolist() == pytest.approx([0.205990, -0.205990, 0.0], abs=1e-6)


# --- losses ------------------------------------------------------------------------------------


def test_aggregate_by_hand() -> None:
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert aggregate(values, mask, "token-mean").item() == pytest.approx(7 / 3)  # (1 + 2 + 4) / 3
    assert aggregate(values, mask, "seq-mean-token-mean").item() == pytest.approx(2.75)  # (1.5 + 4) / 2
    assert aggregate(values, mask, "token-mean", denominator=7).item() == pytest.approx(1.0)  # 7 / 7
    empty_row = torch.tensor([[1, 1, 0], [0, 0, 0]])
    assert aggregate(values, empty_row, "seq-mean-token-mean").item() == pytest.approx(
        1.5
    )  # the empty row is skipped
    with pytest.raises(ValueError, match="seq-mean-token-sum-norm"):
        aggregate(values, mask, "sum")


def _loss_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    # ratios: sequence 0 [1.5, 1.1, 0.5], sequence 1 [0.5, 0.9, 1.5 (padding)]
    ratios = torch.tensor([[1.5, 1.1, 0.5], [0.5, 0.9, 1.5]])
    log_probs = torch.log(ratios).requires_grad_(True)
    old = torch.zeros(2, 3)
    advantages = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    return log_probs, old, advantages, mask


def test_dapo_policy_loss_by_hand() -> None:
    log_probs, old, advantages, mask = _loss_inputs()
    out = policy_loss(log_probs, old, advantages, mask, clip_low=0.2, clip_high=0.28)
    # per token max(-A r, -A clip(r, 0.8, 1.28)):
    #   A = +1: r 1.5 -> max(-1.5, -1.28) = -1.28 (clipped); r 1.1 -> -1.1; r 0.5 -> max(-0.5, -0.8) = -0.5
    #   A = -1: r 0.5 -> max(0.5, 0.8) = 0.8 (clipped); r 0.9 -> 0.9; (r 1.5 is padding)
    # token-mean: (-1.28 - 1.1 - 0.5 + 0.8 + 0.9) / 5 = -1.18 / 5 = -0.236
    assert out.loss.item() == pytest.approx(-0.236, abs=1e-6)
    assert out.clip_fraction.item() == pytest.approx(2 / 5)
    # approx KL = mean(old - new) = -(ln 1.5 + ln 1.1 + ln 0.5 + ln 0.5 + ln 0.9) / 5 = 0.990880 / 5
    assert out.approx_kl.item() == pytest.approx(0.198176, abs=1e-6)
    out.loss.backward()
    # d/d logp of -A r is -A r / 5 where the unclipped term is taken, 0 where clipped or padding
    assert log_probs.grad is not None
    assert log_probs.grad.flatten().tolist() == pytest.approx([0.0, -0.22, -0.1, 0.0, 0.18, 0.0], abs=1e-6)


def test_policy_loss_aggregation_modes_and_denominator() -> None:
    log_probs, old, advantages, mask = _loss_inputs()
    # seq-mean-token-mean: (-2.88 / 3 + 1.7 / 2) / 2 = (-0.96 + 0.85) / 2 = -0.055
    seq = policy_loss(log_probs, old, advantages, mask, mode="seq-mean-token-mean")
    assert seq.loss.item() == pytest.approx(-0.055, abs=1e-6)
    # a micro-batch of a 10-token mini-batch: -1.18 / 10
    assert policy_loss(log_probs, old, advantages, mask, denominator=10).loss.item() == pytest.approx(
        -0.118, abs=1e-6
    )
    # clip-higher matters: with a symmetric 0.2 clip the r = 1.5 token costs -1.2 instead of -1.28
    symmetric = policy_loss(log_probs, old, advantages, mask, clip_high=0.2)
    assert symmetric.loss.item() == pytest.approx((-1.2 - 1.1 - 0.5 + 0.8 + 0.9) / 5, abs=1e-6)
    # per-token advantages broadcast the same way as per-sequence ones
    per_token = policy_loss(log_probs, old, advantages[:, None].expand(2, 3), mask)
    assert per_token.loss.item() == pytest.approx(-0.236, abs=1e-6)


def test_dr_grpo_aggregation_divides_by_a_constant() -> None:
    values = torch.tensor([[1.0, 2.0], [3.0, 5.0]])
    mask = torch.tensor([[1, 1], [1, 0]], dtype=torch.bool)
    # sum of valid tokens 6, over B × T = 4 by default, over 2 responses × 10 (max length) when given
    assert aggregate(values, mask, "seq-mean-token-sum-norm").item() == pytest.approx(1.5)
    assert aggregate(values, mask, "seq-mean-token-sum-norm", denominator=20).item() == pytest.approx(0.3)


def test_cispo_loss_keeps_the_gradient_of_clipped_tokens() -> None:
    log_probs, old, advantages, mask = _loss_inputs()
    out = cispo_loss(log_probs, old, advantages, mask, clip_low=1.0, clip_high=0.28)
    # per token -sg[w]·A·logp with w = clip(r, 0, 1.28): A=+1 w (1.28, 1.1, 0.5); A=-1 w (0.5, 0.9)
    terms = [-1.28 * LN(1.5), -1.1 * LN(1.1), -0.5 * LN(0.5), 0.5 * LN(0.5), 0.9 * LN(0.9)]
    assert out.loss.item() == pytest.approx(sum(terms) / 5, abs=1e-6)
    assert out.clip_fraction.item() == pytest.approx(1 / 5)  # the r = 1.5 token
    out.loss.backward()
    # d/d logp = -w·A / 5, the clipped token included (PPO gives it 0: see the test above)
    assert log_probs.grad is not None
    assert log_probs.grad.flatten().tolist() == pytest.approx([-0.256, -0.22, -0.1, 0.1, 0.18, 0.0], abs=1e-6)


def _gspo_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # sequence 0: log-ratios (ln 2, 0), s = exp(ln 2 / 2) = √2; sequence 1: one token, ratio 1
    log_probs = torch.tensor([[LN(0.5), LN(0.25)], [LN(0.5), 0.0]], requires_grad=True)
    old = torch.tensor([[LN(0.25), LN(0.25)], [LN(0.5), 0.0]])
    return log_probs, old, torch.tensor([[1, 1], [1, 0]], dtype=torch.bool)


@pytest.mark.parametrize("token_level", [False, True])
def test_gspo_loss_by_hand(token_level: bool) -> None:
    log_probs, old, mask = _gspo_inputs()
    out = gspo_loss(log_probs, old, torch.tensor([-1.0, 1.0]), mask, token_level=token_level)
    # A=-1: max(√2, clip(√2, 1 - 3e-4, 1 + 4e-4)) = √2 (unclipped); A=+1, s=1: -1. Mean over sequences.
    assert out.loss.item() == pytest.approx((math.sqrt(2) - 1) / 2, abs=1e-6)
    assert out.clip_fraction.item() == pytest.approx(0.0)
    out.loss.backward()
    # d/d logp_t: sequence 0 (1/2)·(1/2 tokens)·√2 on each token; sequence 1 (1/2)·(-1); GSPO-token with one
    # advantage per sequence has the same gradient (the paper's point)
    assert log_probs.grad is not None
    r = math.sqrt(2) / 4
    close(log_probs.grad, [[r, r], [-0.5, 0.0]])


def test_gspo_clips_the_sequence_ratio_and_gspo_token_differs_with_per_token_advantages() -> None:
    log_probs, old, mask = _gspo_inputs()
    clipped = gspo_loss(log_probs, old, torch.tensor([1.0, 1.0]), mask)
    # A=+1: max(-√2, -(1 + 4e-4)) = -1.0004 (clipped, no gradient); sequence 1: -1
    assert clipped.loss.item() == pytest.approx((-1.0004 - 1) / 2, abs=1e-6)
    assert clipped.clip_fraction.item() == pytest.approx(2 / 3)
    advantages = torch.tensor([[-1.0, 0.0], [1.0, 0.0]])  # per token: only sequence 0's first token counts
    grads = []
    for token_level in (False, True):
        lp = log_probs.detach().clone().requires_grad_(True)
        out = gspo_loss(lp, old, advantages, mask, token_level=token_level)
        assert out.loss.item() == pytest.approx((math.sqrt(2) / 2 - 1) / 2, abs=1e-6)
        out.loss.backward()
        assert lp.grad is not None
        grads.append(lp.grad.tolist())
    # sequence-level: s depends on both tokens, (1/2)(1/2)(√2/2) each; token-level: (1/2)(1/2)√2 on token 0
    r = math.sqrt(2) / 8
    close(grads[0], [[r, r], [-0.5, 0.0]])
    close(grads[1], [[2 * r, 0.0], [-0.5, 0.0]])


def test_kl_k3_by_hand() -> None:
    # policy 0.5, reference 0.25: d = ln 0.5; k3 = 0.5 - ln 0.5 - 1 = 0.193147; equal -> 0; outlier clamped
    logp = torch.log(torch.tensor([0.5, 0.3, 1e-12]))
    ref = torch.log(torch.tensor([0.25, 0.3, 1.0]))
    assert kl_k3(logp, ref).tolist() == pytest.approx([0.193147, 0.0, 10.0], abs=1e-6)


# --- batching rules ----------------------------------------------------------------------------


def test_pack_by_token_budget_by_hand() -> None:
    # longest first into the least-loaded of ceil(25 / 10) = 3 micro-batches:
    # 8 (#2) -> b0; 7 (#4) -> b1; 5 (#0) -> b2; 3 (#1) -> b2 (5 + 3 = 8); 2 (#3) -> b1 (7 + 2 = 9)
    assert pack_by_token_budget([5, 3, 8, 2, 7], 10) == [[0, 1], [2], [3, 4]]
    # three 6s in 2 micro-batches do not fit (12 > 10): one more
    assert pack_by_token_budget([6, 6, 6], 10) == [[0], [1], [2]]
    # an over-budget sequence gets its own micro-batch; the rest share one
    assert pack_by_token_budget([12, 3, 4], 10) == [[0], [1, 2]]
    # at least 2 micro-batches (another rank needs 2): loads balanced 2 / 2
    assert pack_by_token_budget([1, 1, 1, 1], 10, min_micro_batches=2) == [[0, 2], [1, 3]]
    assert pack_by_token_budget([0, 0, 0], 10, min_micro_batches=3) == [[0], [1], [2]]
    assert pack_by_token_budget([], 10) == []
    with pytest.raises(ValueError, match="micro-batches from 2"):
        pack_by_token_budget([1, 2], 10, min_micro_batches=3)
    with pytest.raises(ValueError, match="budget"):
        pack_by_token_budget([1], 0)


def test_pack_by_token_budget_invariants_on_random_lengths() -> None:
    rng = random.Random(0)
    for _ in range(200):
        lengths = [rng.randint(1, 40) for _ in range(rng.randint(1, 30))]
        budget = rng.randint(10, 60)
        batches = pack_by_token_budget(lengths, budget)
        assert batches == pack_by_token_budget(lengths, budget)  # deterministic
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))  # each sequence once
        for b in batches:
            assert sum(lengths[i] for i in b) <= budget or len(b) == 1
        fitting = sum(length for length in lengths if length <= budget)
        oversized = sum(length > budget for length in lengths)
        assert len(batches) >= oversized + math.ceil(fitting / budget)


def test_mix_policy_unconditional_and_conditional() -> None:
    always = mix_policy_decision([True, True, False, True])
    assert always.replace == [True, True, False, True]
    assert (always.candidates, always.triggered, always.replaced, always.evaluated) == (3, 4, 3, 0)
    # group accuracies 0.5, 0.25, 0, 1 against 0.5: below = F, T, T, F; group 2 has no offline text
    accuracies = [[1, 1, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]]
    cond = mix_policy_decision([True, True, False, True], accuracies, threshold=0.5)
    assert cond.replace == [False, True, False, False]
    assert cond.metrics() == {
        "mix_policy/online_groups_evaluated": 4.0,
        "mix_policy/offline_candidates": 3.0,
        "mix_policy/offline_triggered_groups": 2.0,
        "mix_policy/offline_replaced_groups": 1.0,
        "mix_policy/acc_threshold": 0.5,
    }
    with pytest.raises(ValueError, match="online accuracies"):
        mix_policy_decision([True], None, threshold=0.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        mix_policy_decision([True], [[1.0]], threshold=1.5)


def _correction_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # π_old / π_rollout per token: sequence 0 (4, 1, 0.25), sequence 1 (1.5, 1.2, padding)
    old = torch.full((2, 3), LN(0.5))
    ratios = torch.tensor([[4.0, 1.0, 0.25], [1.5, 1.2, 7.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    return old, old - torch.log(ratios), mask


def test_token_level_tis_truncates_and_mis_drops() -> None:
    old, rollout, mask = _correction_inputs()
    tis = rollout_correction(old, rollout, mask, mode="tis", cap=2.0)
    close(tis.weights, [[2.0, 1.0, 0.25], [1.5, 1.2, 1.0]])  # padding: weight 1, never counted
    assert tis.changed.tolist() == [[True, False, False], [False, False, False]]
    mis = rollout_correction(old, rollout, mask, mode="mis", cap=2.0)  # keep [0.5, 2]
    close(mis.weights, [[0.0, 1.0, 0.0], [1.5, 1.2, 1.0]])
    assert mis.changed.tolist() == [[True, False, True], [False, False, False]]


def test_sequence_level_weights_are_the_product_of_the_token_ratios() -> None:
    old, rollout, mask = _correction_inputs()
    # sequence 0: 4 · 1 · 0.25 = 1; sequence 1: 1.5 · 1.2 = 1.8 (padding not counted)
    tis = rollout_correction(old, rollout, mask, mode="tis", level="sequence", cap=2.0)
    close(tis.weights, [[1.0] * 3, [1.8] * 3], atol=1e-5)
    capped = rollout_correction(old, rollout, mask, mode="tis", level="sequence", cap=1.5)
    close(capped.weights, [[1.0] * 3, [1.5] * 3], atol=1e-5)
    assert capped.changed.tolist() == [[False] * 3, [True, True, False]]
    mis = rollout_correction(old, rollout, mask, mode="mis", level="sequence", cap=1.5)
    close(mis.weights, [[1.0] * 3, [0.0] * 3], atol=1e-5)


def test_rollout_correction_leaves_offline_tokens_alone_and_rejects_a_cap_of_one() -> None:
    old, rollout, mask = _correction_inputs()
    offline = torch.full_like(rollout, float("nan"))
    close(rollout_correction(old, offline, mask, mode="mis", cap=2.0).weights, [[1.0] * 3, [1.0] * 3])
    with pytest.raises(ValueError, match="cap must be > 1"):
        rollout_correction(old, rollout, mask, mode="tis", cap=1.0)
