"""REINFORCE++'s per-token whitening and GDPO against values worked out by hand (in the comments) and
against the reference implementations' formulas, computed here on the same tensors (veRL and EasyR1
cannot be imported in this environment, so each reference is written out with its source quoted);
the richer estimator input (:class:`StepRewards`) next to the simple ``advantages(rewards)`` form."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from videorl.algorithms import StepRewards, advantages_of
from videorl.algorithms.advantages import batch_whiten, gdpo_advantages, reinforce_pp_advantages
from videorl.algorithms.components import GDPOEstimator, GRPOEstimator, ReinforcePlusPlusEstimator
from videorl.testing import assert_algorithm_contract


def close(actual: torch.Tensor, expected: list, atol: float = 1e-6) -> None:
    torch.testing.assert_close(actual.double(), torch.tensor(expected).double(), atol=atol, rtol=0)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """veRL ``verl/utils/torch_functional.py::masked_whiten`` (EasyR1's ``VF.masked_whiten`` is the same):
    ``mean = Σ m·v / Σ m``, ``var = Σ m·(v - mean)² / Σ m · N/(N - 1)`` (unbiased), ``(v - mean)·rsqrt(var
    + 1e-8)``."""
    n = mask.sum()
    mean = (values * mask).sum() / n
    var = ((values - mean) ** 2 * mask).sum() / n * (n / (n - 1))
    return (values - mean) * torch.rsqrt(var + 1e-8)


def token_rows(
    per_response: torch.Tensor, lengths: torch.Tensor, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-response values ``(G, n)`` as right-padded token rows ``(G·n, width)`` and their mask."""
    flat, lens = per_response.flatten(), lengths.flatten()
    mask = (torch.arange(width)[None, :] < lens[:, None]).float()
    return flat[:, None] * mask, mask


# --- REINFORCE++ ---------------------------------------------------------------------------------

REWARDS = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
LENGTHS = torch.tensor([[1, 3], [2, 2]])


def test_reinforce_plus_plus_whitens_over_the_batch_s_tokens_by_default() -> None:
    # tokens: one of reward 1, three of 0, two of 1, two of 1: N = 8, mean 5/8,
    # unbiased var (5·(3/8)² + 3·(5/8)²) / 7 = 1.875 / 7
    s = math.sqrt(1.875 / 7)
    expected = [[0.375 / s, -0.625 / s], [0.375 / s, 0.375 / s]]
    close(reinforce_pp_advantages(REWARDS, LENGTHS, eps=0.0), expected)
    step = StepRewards(REWARDS, LENGTHS, (({}, {}), ({}, {})))
    close(advantages_of(ReinforcePlusPlusEstimator(adv_eps=1e-12), step), expected)
    # the per-response option (videorl's form before issue 32): one count per response, lengths ignored
    responses = ReinforcePlusPlusEstimator(adv_eps=1e-12, whiten_over="responses")
    close(advantages_of(responses, step), [[0.5, -1.5], [0.5, 0.5]])


def test_reinforce_plus_plus_equals_verl_and_easyr1_on_the_same_tensors() -> None:
    # veRL core_algos.py::compute_reinforce_plus_plus_outcome_advantage (EasyR1's is the same): the
    # outcome reward at each response's last token, returns accumulated backwards with gamma = 1 and
    # reset after the end of the response, masked_whiten over the valid tokens
    width = 4
    _, mask = token_rows(REWARDS, LENGTHS, width)
    token_rewards = torch.zeros(4, width)
    for row, (r, n) in enumerate(zip(REWARDS.flatten(), LENGTHS.flatten(), strict=True)):
        token_rewards[row, int(n) - 1] = r
    returns, running = torch.zeros_like(token_rewards), torch.zeros(4)
    for t in reversed(range(width)):
        running = token_rewards[:, t] + 1.0 * running
        returns[:, t] = running
        running = running * mask[:, t]
    reference = masked_whiten(returns, mask) * mask
    ours, _ = token_rows(reinforce_pp_advantages(REWARDS, LENGTHS), LENGTHS, width)
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=0)  # eps: std + 1e-6 vs sqrt(var + 1e-8)

    # REINFORCE++-baseline (veRL compute_reinforce_plus_plus_baseline_outcome_advantage): the group
    # mean subtracted, tiled over the tokens, masked_whiten
    centred = REWARDS - REWARDS.mean(dim=1, keepdim=True)
    tiled, _ = token_rows(centred, LENGTHS, width)
    reference = masked_whiten(tiled, mask) * mask
    ours, _ = token_rows(reinforce_pp_advantages(REWARDS, LENGTHS, group_baseline=True), LENGTHS, width)
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=0)


def test_whitening_edge_cases_give_exact_zeros() -> None:
    assert batch_whiten(torch.ones(2, 2), lengths=LENGTHS).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert batch_whiten(torch.tensor([[3.0]]), lengths=torch.tensor([[1]])).tolist() == [[0.0]]  # one token
    with pytest.raises(ValueError, match="lengths shaped"):
        batch_whiten(REWARDS, lengths=torch.tensor([1, 2]))


# --- GDPO ----------------------------------------------------------------------------------------

ACCURACY = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
FORMAT = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 1.0]])


def _parts() -> tuple[tuple[dict[str, float], ...], ...]:
    return tuple(
        tuple({"accuracy": float(a), "format": float(f)} for a, f in zip(ar, fr, strict=True))
        for ar, fr in zip(ACCURACY.tolist(), FORMAT.tolist(), strict=True)
    )


def test_gdpo_normalises_each_reward_part_in_its_group_then_whitens_the_sum() -> None:
    # group 0: accuracy (1, 1, 0, 0): mean 0.5, unbiased std sqrt(1/3) -> ±√3/2;
    #          format (1, 0, 0, 0): mean 0.25, std 0.5 -> (1.5, -0.5, -0.5, -0.5)
    # group 1: accuracy all 0 -> 0; format (1, 1, 0, 1): mean 0.75, std 0.5 -> (0.5, 0.5, -1.5, 0.5)
    h = math.sqrt(3) / 2
    summed = [h + 1.5, h - 0.5, -h - 0.5, -h - 0.5, 0.5, 0.5, -1.5, 0.5]
    # the sum has mean 0 (each part is centred per group); whitened over the 8 responses: / unbiased std
    std = math.sqrt(sum(v * v for v in summed) / 7)
    expected = [[v / std for v in summed[:4]], [v / std for v in summed[4:]]]
    out = gdpo_advantages(torch.stack([ACCURACY, FORMAT]), torch.tensor([1.0, 1.0]), eps=1e-12)
    close(out, expected, atol=1e-5)
    step = StepRewards(ACCURACY + FORMAT, torch.ones(2, 4, dtype=torch.int64), _parts())
    close(advantages_of(GDPOEstimator(adv_eps=1e-12), step), expected, atol=1e-5)
    # GRPO on the summed reward (2, 1, 0, 0) ranks the same responses but spaces them differently:
    # (1.25, 0.25, -0.75, -0.75) / std: the middle response keeps less of its format credit
    grpo = advantages_of(GRPOEstimator(), step)
    assert grpo[0, 1] / grpo[0, 0] == pytest.approx(0.2, abs=1e-5)
    assert out[0, 1] / out[0, 0] == pytest.approx((h - 0.5) / (h + 1.5), abs=1e-5)


def test_gdpo_weights_and_per_token_whitening_equal_verl_s_gdpo() -> None:
    # veRL's gdpo (NVlabs/GDPO verl-GDPO ray_trainer.py::compute_advantage): GRPO advantages of each
    # reward key (compute_grpo_outcome_advantage: (r - mean) / (std + 1e-6) per group, tiled over the
    # tokens), summed, then masked_whiten(sum, mask) * mask over the batch's tokens
    lengths = torch.tensor([[2, 1, 3, 1], [1, 4, 2, 2]])
    width = 4
    per_key = []
    for scores in (ACCURACY, FORMAT):
        mean, std = scores.mean(dim=1, keepdim=True), scores.std(dim=1, keepdim=True)
        per_key.append((scores - mean) / (std + 1e-6))
    tiled, mask = token_rows(2.0 * per_key[0] + 0.5 * per_key[1], lengths, width)
    reference = masked_whiten(tiled, mask) * mask
    step = StepRewards(ACCURACY + FORMAT, lengths, _parts())
    estimator = GDPOEstimator(reward_weights={"accuracy": 2.0, "format": 0.5}, whiten_over="tokens")
    ours, _ = token_rows(advantages_of(estimator, step), lengths, width)
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=0)


def test_gdpo_reads_a_missing_part_as_0_and_rejects_a_part_no_response_has() -> None:
    parts = list(list(row) for row in _parts())
    parts[1][2] = {}  # a reward that failed scores 0 with no parts
    ones = torch.ones(2, 4, dtype=torch.int64)
    complete = advantages_of(GDPOEstimator(), StepRewards(ACCURACY + FORMAT, ones, _parts()))
    step = StepRewards(ACCURACY + FORMAT, ones, parts)
    close(advantages_of(GDPOEstimator(), step), complete.tolist())  # both parts were 0 there already
    message = (
        r"no response of this step has the reward part 'iou' \(parts seen: accuracy, format\); "
        r"set algorithm.estimator_options.reward_weights"
    )
    with pytest.raises(ValueError, match=message):
        advantages_of(GDPOEstimator(reward_weights={"iou": 1.0}), step)
    parts[0][0] = {"accuracy": float("nan"), "format": 1.0}
    with pytest.raises(ValueError, match="'accuracy' of response 0 of group 0 is nan"):
        advantages_of(GDPOEstimator(), StepRewards(step.rewards, step.lengths, parts))
    for bad in ({}, {"accuracy": "1"}, {"accuracy": float("inf")}):
        with pytest.raises(ValueError, match="reward_weights"):
            GDPOEstimator(reward_weights=bad)  # type: ignore[arg-type]


# --- the estimator's input ------------------------------------------------------------------------


@dataclasses.dataclass
class RewardsOnly:
    """A third-party estimator written before StepRewards existed: the simple form."""

    scale: float = dataclasses.field(default=2.0, metadata={"help": "multiplies the rewards"})

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        return rewards * self.scale


@dataclasses.dataclass
class LengthAware:
    """A third-party estimator of the richer form: reads the lengths."""

    def estimate(self, step: StepRewards) -> torch.Tensor:
        return step.rewards * step.lengths


def test_both_estimator_forms_run_through_one_call_and_pass_the_contract() -> None:
    step = StepRewards(REWARDS, LENGTHS, (({}, {}), ({}, {})))
    close(advantages_of(RewardsOnly(), step), [[2.0, 0.0], [2.0, 2.0]])
    close(advantages_of(LengthAware(), step), [[1.0, 0.0], [2.0, 2.0]])
    assert isinstance(assert_algorithm_contract(RewardsOnly), RewardsOnly)
    assert isinstance(assert_algorithm_contract(LengthAware), LengthAware)

    @dataclasses.dataclass
    class WrongShape:
        def estimate(self, step: StepRewards) -> torch.Tensor:
            return step.rewards.flatten()

    with pytest.raises(ValueError, match=r"WrongShape returned advantages shaped \(4,\) for rewards shaped"):
        advantages_of(WrongShape(), step)
