"""The KL estimators, the dual clip, seq-mean-token-sum, GMPO and SAPO against values worked out by hand
(in the comments) and against the reference implementations' formulas on the same tensors (veRL, EasyR1
and TRL cannot be imported here: each reference is written out below with its source quoted)."""

from __future__ import annotations

import math

import pytest
import torch

from videorl.algorithms import Algorithm, LossScale, PolicyLossFunction
from videorl.algorithms.components import (
    CISPOLoss,
    GDPOEstimator,
    GMPOLoss,
    GRPOEstimator,
    GSPOLoss,
    PPOClipLoss,
    SAPOLoss,
)
from videorl.algorithms.formulas import (
    KL_ESTIMATORS,
    aggregate,
    denominator,
    gmpo_loss,
    kl_penalty,
    policy_loss,
    sapo_loss,
)
from videorl.testing import assert_algorithm_contract

LN = math.log
MASK = torch.tensor([[1, 1, 0]], dtype=torch.bool)  # the third position is padding


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# --- KL ------------------------------------------------------------------------------------------


def test_the_kl_estimators_by_hand() -> None:
    # policy 0.5, reference 0.25: logp - ref = ln 2
    logp, ref = torch.log(torch.tensor([0.5])), torch.log(torch.tensor([0.25]))
    expected = {
        "kl": LN(2), "k1": LN(2), "abs": LN(2), "mse": LN(2) ** 2 / 2, "k2": LN(2) ** 2 / 2,
        "low_var_kl": 0.5 - LN(0.5) - 1, "k3": 0.5 - LN(0.5) - 1,  # exp(d) - d - 1, d = ln 0.5
    }  # fmt: skip
    assert set(expected) == set(KL_ESTIMATORS)
    for name, value in expected.items():
        assert kl_penalty(logp, ref, name).item() == pytest.approx(value, abs=1e-6), name
    assert kl_penalty(-logp, -ref, "abs").item() == pytest.approx(LN(2), abs=1e-6)
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
        kl_penalty(logp, ref, "k4")


@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
def test_the_kl_gradient_is_finite_and_0_at_a_padded_position(estimator: str) -> None:
    # reference rows are zero-padded; the policy's log-prob at the padded position is -100:
    # d = ref - logp = 100 there, and exp(100) overflows float32 (past 88.7)
    logp = torch.tensor([[LN(0.5), LN(0.3), -100.0]], requires_grad=True)
    ref = torch.tensor([[LN(0.25), LN(0.3), 0.0]])
    term = aggregate(kl_penalty(logp, ref, estimator), MASK)
    term.backward()
    assert logp.grad is not None and torch.isfinite(logp.grad).all(), logp.grad
    assert logp.grad[0, 2] == 0.0
    # the k3 of the valid tokens, over 2 tokens: (0.193147 + 0) / 2; its gradient 1 - exp(d) = 0.5 / 2
    if estimator in ("low_var_kl", "k3"):
        assert term.item() == pytest.approx((0.5 - LN(0.5) - 1) / 2, abs=1e-6)
        assert logp.grad[0].tolist() == pytest.approx([0.25, 0.0, 0.0], abs=1e-6)


def test_without_bounding_the_log_ratio_the_k3_gradient_is_nan() -> None:
    # what the test above guards against: the unbounded form's clamp passes 0 × inf = NaN back
    logp = torch.tensor([[LN(0.5), -100.0]], requires_grad=True)
    d = torch.tensor([[LN(0.25), 0.0]]) - logp
    unbounded = torch.clamp(torch.exp(d) - d - 1.0, min=-10.0, max=10.0)
    aggregate(unbounded, torch.tensor([[1, 0]])).backward()
    assert logp.grad is not None and torch.isnan(logp.grad[0, 1])


# --- aggregation and the dual clip --------------------------------------------------------------


def test_seq_mean_token_sum_by_hand() -> None:
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    # per response sums (3, 4), mean over the 2 responses (veRL agg_loss seq-mean-token-sum)
    assert aggregate(values, mask, "seq-mean-token-sum").item() == pytest.approx(3.5)
    assert aggregate(values, mask, "seq-mean-token-sum", denominator=4).item() == pytest.approx(7 / 4)
    scale = LossScale(tokens=7.0, responses=3.0, max_response_length=5)
    assert [denominator(m, scale) for m in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")] == [
        7.0, 3.0, 3.0,
    ]  # fmt: skip
    assert denominator("seq-mean-token-sum-norm", scale) == 15.0
    with pytest.raises(ValueError, match="unknown loss aggregation mode"):
        denominator("sum", scale)


def test_the_dual_clip_bounds_the_loss_of_negative_advantages_by_hand() -> None:
    # ratios 5, 2 with A = -1 and 5 with A = +1
    log_probs = torch.log(torch.tensor([[5.0, 2.0], [5.0, 1.0]])).requires_grad_(True)
    old, adv = torch.zeros(2, 2), torch.tensor([-1.0, 1.0])
    mask = torch.tensor([[1, 1], [1, 0]], dtype=torch.bool)
    out = policy_loss(log_probs, old, adv, mask, clip_ratio_c=3.0)
    # A=-1: max(5, 1.28) = 5 -> min(5, 3) = 3 (dual clip); max(2, 1.28) = 2 < 3 stays;
    # A=+1: max(-5, -1.28) = -1.28 (the clip, no dual clip for A > 0). Token-mean over 3.
    assert out.loss.item() == pytest.approx((3 + 2 - 1.28) / 3, abs=1e-6)
    assert out.clip_fraction.item() == pytest.approx(2 / 3)
    out.loss.backward()
    assert log_probs.grad is not None  # only the ratio-2 token keeps a gradient: -A·r / 3
    torch.testing.assert_close(log_probs.grad, torch.tensor([[0.0, 2 / 3], [0.0, 0.0]]))
    without = policy_loss(log_probs, old, adv, mask)
    assert without.loss.item() == pytest.approx((5 + 2 - 1.28) / 3, abs=1e-6)

    # veRL core_algos.py::compute_policy_loss_vanilla (EasyR1 compute_policy_loss "default" the same):
    # pg3 = -A·c; clip2 = min(pg3, max(pg1, pg2)); where(A < 0, clip2, max(pg1, pg2)), token-mean
    ratio, a = torch.exp(log_probs.detach()), adv[:, None]
    clip1 = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 0.8, 1.28))
    reference = torch.where(a < 0, torch.minimum(-a * 3.0, clip1), clip1)
    assert out.loss.item() == pytest.approx(float((reference * mask).sum() / mask.sum()), abs=1e-6)
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1"):
        PPOClipLoss(clip_ratio_c=1.0)


# --- GMPO ---------------------------------------------------------------------------------------


def test_gmpo_by_hand_and_no_gradient_at_padding() -> None:
    # log-ratios (0.2, 0.6) against old = 0, then a padded position at -100
    one = LossScale(tokens=2.0, responses=1.0, max_response_length=3)
    for a, value, grad in [
        # A > 0: min(δ, clip(δ, -0.4, 0.4)) = (0.2, 0.4): exp(0.3); the clipped token gets no gradient
        (1.0, -math.exp(0.3), [-math.exp(0.3) / 2, 0.0, 0.0]),
        # A < 0: the pessimistic side is max(δ, clip(δ)) = (0.2, 0.6), nothing clipped: +exp(0.4)
        (-1.0, math.exp(0.4), [math.exp(0.4) / 2] * 2 + [0.0]),
    ]:
        log_probs = torch.tensor([[0.2, 0.6, -100.0]], requires_grad=True)
        out = GMPOLoss().loss(log_probs, torch.zeros(1, 3), torch.tensor([a]), MASK, one)
        assert out.loss.item() == pytest.approx(value, rel=1e-6)
        out.loss.backward()
        assert log_probs.grad is not None
        torch.testing.assert_close(log_probs.grad, torch.tensor([grad]))
        assert out.clip_fraction.item() == pytest.approx(0.5 if a > 0 else 0.0)


def test_gmpo_clips_in_log_space_by_the_paper_s_asymmetric_range() -> None:
    # clip (-0.1, 0.4), A = -1, log-ratios (-0.3, 0.6): max(-0.3, -0.1) = -0.1 (clipped), max(0.6, 0.4) =
    # 0.6; the geometric mean exp((−0.1 + 0.6) / 2) = exp(0.25), the loss +exp(0.25)
    out = gmpo_loss(torch.tensor([[-0.3, 0.6]]), torch.zeros(1, 2), torch.tensor([-1.0]),
                    torch.ones(1, 2, dtype=torch.bool), clip_low=0.1, clip_high=0.4)  # fmt: skip
    assert out.loss.item() == pytest.approx(math.exp(0.25), rel=1e-6)


def test_gmpo_equals_verl_geo_mean_on_the_same_tensors() -> None:
    torch.manual_seed(0)
    log_probs = torch.randn(3, 4) * 0.3 - 1.0
    old = log_probs + torch.randn(3, 4) * 0.3
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.float32)
    adv = torch.tensor([1.0, -0.5, 0.25])
    # veRL core_algos.py::compute_policy_loss_geo_mean (clip_ratio_low = high = 0.4, TRL's GMPO default):
    # sgn(A)·min(sgn(A)·δ, sgn(A)·clamp(δ, -low, high)), exp of its masked mean per response,
    # -A·ratio averaged over the responses
    a = adv[:, None].expand(3, 4)
    delta = log_probs - old
    sgn = torch.sign(a)
    chosen = sgn * torch.minimum(sgn * delta, sgn * torch.clamp(delta, -0.4, 0.4))
    ratio = torch.exp((chosen * mask).sum(-1) / (mask.sum(-1) + 1e-8))
    reference = torch.mean(-((a * mask).sum(-1) / (mask.sum(-1) + 1e-8)) * ratio)
    ours = gmpo_loss(log_probs, old, adv, mask.bool(), clip_low=0.4, clip_high=0.4)
    assert ours.loss.item() == pytest.approx(reference.item(), abs=1e-6)


# --- SAPO ---------------------------------------------------------------------------------------


def test_sapo_by_hand() -> None:
    # ratios 1.5 (A = +1, τ = 1.0) and 0.5 (A = -1, τ = 1.05); the padded ratio (-100 in log space) is ignored
    log_probs = torch.tensor([[LN(1.5), LN(0.5), -100.0]], requires_grad=True)
    adv = torch.tensor([[1.0, -1.0, 1.0]])
    out = sapo_loss(log_probs, torch.zeros(1, 3), adv, MASK)
    # f(r) = σ(τ(r - 1))·4/τ; per token -f(r)·A; token-mean over 2
    f_pos = sigmoid(0.5) * 4.0
    f_neg = sigmoid(1.05 * -0.5) * 4.0 / 1.05
    assert out.loss.item() == pytest.approx((-f_pos + f_neg) / 2, abs=1e-6)
    assert out.clip_fraction.item() == 0.0
    out.loss.backward()
    # d/d logp of -A·f(r) is -A·4σ(1 - σ)·r (with σ = σ(τ(r - 1))), over 2 tokens; 0 at padding
    s_pos, s_neg = sigmoid(0.5), sigmoid(-0.525)
    expected = [-4 * s_pos * (1 - s_pos) * 1.5 / 2, 4 * s_neg * (1 - s_neg) * 0.5 / 2, 0.0]
    assert log_probs.grad is not None
    torch.testing.assert_close(log_probs.grad, torch.tensor([expected]))
    # on-policy (r = 1) the gradient is the policy gradient's, -A per token, whatever τ
    on_policy = torch.zeros(1, 2, requires_grad=True)
    sapo_loss(on_policy, torch.zeros(1, 2), torch.tensor([[2.0, -3.0]]), torch.ones(1, 2, dtype=torch.bool),
              mode="seq-mean-token-sum").loss.backward()  # fmt: skip
    assert on_policy.grad is not None and on_policy.grad[0].tolist() == pytest.approx([-2.0, 3.0])


def test_sapo_equals_trl_and_easyr1_on_the_same_tensors() -> None:
    torch.manual_seed(1)
    log_probs = torch.randn(3, 4) * 0.3 - 1.0
    old = log_probs + torch.randn(3, 4) * 0.3
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.float32)
    adv = torch.tensor([1.0, -0.5, 0.25])[:, None].expand(3, 4)
    # TRL GRPOTrainer loss_type="sapo": temperatures = where(A > 0, τ_pos, τ_neg),
    # per_token_loss = -sigmoid(temperatures·(coef_1 - 1))·4/temperatures·A; EasyR1 the same gate with
    # exp(clamp(δ, -20, 20)); videorl's default aggregation, token-mean (EasyR1's "token")
    ratio = torch.exp(log_probs - old)
    temperatures = torch.where(adv > 0, 1.0, 1.05)
    per_token = -torch.sigmoid(temperatures * (ratio - 1)) * 4 / temperatures * adv
    reference = (per_token * mask).sum() / mask.sum()
    ours = sapo_loss(log_probs, old, adv, mask.bool())
    assert ours.loss.item() == pytest.approx(reference.item(), abs=1e-6)


# --- the components ------------------------------------------------------------------------------


@pytest.mark.parametrize("component", [GDPOEstimator, GMPOLoss, SAPOLoss])
def test_the_new_built_ins_pass_the_third_party_contract(component: type) -> None:
    assert isinstance(assert_algorithm_contract(component), component)
    assert isinstance(assert_algorithm_contract(PPOClipLoss, clip_ratio_c=3.0), PPOClipLoss)


def test_the_kl_and_entropy_terms_follow_the_loss_s_aggregation() -> None:
    modes: list[tuple[PolicyLossFunction, str]] = [
        (PPOClipLoss(), "token-mean"),
        (PPOClipLoss(loss_agg_mode="seq-mean-token-sum"), "seq-mean-token-sum"),
        (CISPOLoss(loss_agg_mode="seq-mean-token-sum-norm"), "seq-mean-token-sum-norm"),
        (GSPOLoss(), "seq-mean-token-mean"),
        (GMPOLoss(), "seq-mean-token-mean"),
        (SAPOLoss(), "token-mean"),
    ]
    for loss, mode in modes:
        assert Algorithm(GRPOEstimator(), loss).loss_agg_mode == mode, loss
    with pytest.raises(ValueError, match="tau_pos and tau_neg must be > 0"):
        SAPOLoss(tau_neg=0.0)
