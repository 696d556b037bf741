from __future__ import annotations

import math

import torch
from videorl_algorithm_gmpo.loss import GMPOLoss

from videorl.api import LossScale
from videorl.testing import assert_algorithm_contract

ONE = LossScale(tokens=2.0, responses=1.0, max_response_length=4)


def test_gmpo_passes_the_algorithm_contract() -> None:
    assert isinstance(assert_algorithm_contract(GMPOLoss), GMPOLoss)


def test_gmpo_by_hand_with_a_positive_advantage() -> None:
    log_probs = torch.tensor([[0.2, 0.6]], requires_grad=True)  # log-ratios (0.2, 0.6) against old = 0
    out = GMPOLoss().loss(
        log_probs, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2, dtype=torch.bool), ONE
    )
    # A > 0: min(δ, clip(δ, -0.4, 0.4)) = (0.2, 0.4); geometric mean exp(0.3); loss -exp(0.3)
    assert math.isclose(out.loss.item(), -math.exp(0.3), rel_tol=1e-6)
    assert math.isclose(out.clip_fraction.item(), 0.5)
    out.loss.backward()
    assert log_probs.grad is not None  # the clipped token carries no gradient
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-math.exp(0.3) / 2, 0.0]]))


def test_gmpo_by_hand_with_a_negative_advantage() -> None:
    log_probs = torch.tensor([[0.2, 0.6]], requires_grad=True)
    out = GMPOLoss().loss(
        log_probs, torch.zeros(1, 2), torch.tensor([-1.0]), torch.ones(1, 2, dtype=torch.bool), ONE
    )
    # A < 0: sgn·min(-δ, clip(-δ)) = (0.2, 0.6), nothing clipped; loss +exp(0.4), gradient exp(0.4)/2 each
    assert math.isclose(out.loss.item(), math.exp(0.4), rel_tol=1e-6)
    out.loss.backward()
    assert log_probs.grad is not None
    torch.testing.assert_close(log_probs.grad, torch.tensor([[math.exp(0.4) / 2] * 2]))


def test_gmpo_clips_the_log_ratio_by_the_paper_s_range_on_either_side() -> None:
    # clip (-0.1, 0.4), A < 0, log-ratios (-0.3, 0.6): the pessimistic side is max(δ, clip(δ)) =
    # (-0.1, 0.6), the geometric mean exp(0.25), the loss +exp(0.25), as the built-in gmpo computes it
    loss = GMPOLoss(log_clip_low=0.1, log_clip_high=0.4)
    out = loss.loss(
        torch.tensor([[-0.3, 0.6]]),
        torch.zeros(1, 2),
        torch.tensor([-1.0]),
        torch.ones(1, 2, dtype=torch.bool),
        ONE,
    )
    assert math.isclose(out.loss.item(), math.exp(0.25), rel_tol=1e-6)
