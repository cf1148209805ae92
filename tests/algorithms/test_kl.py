"""KL estimators k1/k2/k3 against a reference: hand values, unbiasedness, masks, gradcheck."""

import math

import pytest
import torch

from tracerl.algorithms.losses import k1, k2, k3, kl_loss

D = torch.float64


def test_estimators_by_hand():
    # log pi = log 0.5, log pi_ref = log 0.25 → log r = log(0.25/0.5) = -log 2, r = 0.5
    # k1 = log 2 = 0.6931; k2 = (log 2)^2/2 = 0.2402; k3 = (0.5 - 1) + log 2 = 0.1931
    lp, ref = torch.tensor([[math.log(0.5)]], dtype=D), torch.tensor([[math.log(0.25)]], dtype=D)
    assert k1(lp, ref).item() == pytest.approx(math.log(2))
    assert k2(lp, ref).item() == pytest.approx(math.log(2) ** 2 / 2)
    assert k3(lp, ref).item() == pytest.approx(-0.5 + math.log(2))


def test_k1_and_k3_are_unbiased_for_the_true_kl():
    # p = [0.5, 0.3, 0.2], q = [0.2, 0.3, 0.5]; KL(p||q) = .5 ln 2.5 + 0 + .2 ln .4 = 0.27489
    p = torch.tensor([0.5, 0.3, 0.2], dtype=D)
    q = torch.tensor([0.2, 0.3, 0.5], dtype=D)
    true_kl = (p * (p / q).log()).sum().item()
    assert true_kl == pytest.approx(0.5 * math.log(2.5) + 0.2 * math.log(0.4))
    lp, ref = p.log().view(1, 3), q.log().view(1, 3)
    # exact expectation under p of each per-token estimate (rather than a Monte Carlo average)
    assert (p * k1(lp, ref)[0]).sum().item() == pytest.approx(true_kl, rel=1e-12)
    assert (p * k3(lp, ref)[0]).sum().item() == pytest.approx(true_kl, rel=1e-12)
    assert (p * k2(lp, ref)[0]).sum().item() != pytest.approx(true_kl, rel=1e-3)  # k2 is biased


def test_masked_positions_are_zero_even_with_nan():
    lp = torch.tensor([[-1.0, float("nan")]], dtype=D)
    ref = torch.tensor([[-2.0, float("nan")]], dtype=D)
    mask = torch.tensor([[1, 0]])
    for fn in (k1, k2, k3):
        assert fn(lp, ref, mask)[0, 1].item() == 0.0
    loss, stats = kl_loss(lp, ref, mask, estimator="k3", coef=0.1)
    # k3 at token 0: log r = -1 → (e^-1 - 1) + 1 = 0.36788; × 0.1
    assert loss.item() == pytest.approx(0.1 * math.exp(-1))
    assert stats["kl_k1"].item() == pytest.approx(1.0)


def test_kl_is_zero_when_policies_match_and_unknown_estimator_fails():
    lp = torch.tensor([[-0.3, -1.2]], dtype=D)
    loss, _ = kl_loss(lp, lp.clone(), torch.ones(1, 2), estimator="k2")
    assert loss.item() == 0.0
    with pytest.raises(ValueError, match="estimator"):
        kl_loss(lp, lp, torch.ones(1, 2), estimator="k4")


def test_gradcheck_kl_losses():
    torch.manual_seed(1)
    ref = torch.randn(2, 4, dtype=D) - 1
    lp = (ref + 0.3 * torch.randn(2, 4, dtype=D)).requires_grad_()
    mask = torch.tensor([[1, 1, 0, 1], [0, 1, 1, 1]])
    for est in ("k1", "k2", "k3"):
        assert torch.autograd.gradcheck(lambda x, est=est: kl_loss(x, ref, mask, estimator=est)[0], (lp,))
