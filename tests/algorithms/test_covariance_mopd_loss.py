"""Clip-Cov / KL-Cov (covariance-targeted entropy control) and the MOPD distillation loss."""

import math

import pytest
import torch

from tracerl.algorithms.losses import clip_cov, clip_cov_selection, kl_cov, mopd_loss, token_covariance

D = torch.float64
# logprobs [-1,-2,-3,-4]: mean -2.5 → centred [1.5, 0.5, -0.5, -1.5]
# adv [3, 1, -1, -2]: mean 0.25 → centred [2.75, 0.75, -1.25, -2.25]
# Cov = products = [4.125, 0.375, 0.625, 3.375]
LP = torch.tensor([[-1.0, -2.0, -3.0, -4.0]], dtype=D)
ADV = torch.tensor([[3.0, 1.0, -1.0, -2.0]], dtype=D)
MASK = torch.ones(1, 4)


def test_token_covariance_by_hand():
    torch.testing.assert_close(token_covariance(LP, ADV, MASK), torch.tensor([[4.125, 0.375, 0.625, 3.375]], dtype=D))


def test_clip_cov_detaches_only_high_covariance_tokens():
    # on-policy (old = θ): ratio 1 → surrogate = A; loss = −(3 + 1 − 1 − 2)/4 = −0.25 whatever is detached
    # candidates with 1 ≤ Cov ≤ 5: tokens 0 and 3; clip_ratio 0.5 → ⌊0.5·4⌋ = 2 → both detached
    # gradient of −ratio·A/4 wrt log π: −A/4 = [−0.75, −0.25, 0.25, 0.5] → with detach [0, −0.25, 0.25, 0]
    lp = LP.clone().requires_grad_()
    loss, stats = clip_cov(lp, LP, ADV, MASK, clip_ratio=0.5, cov_low=1.0, cov_high=5.0)
    loss.backward()
    assert loss.item() == pytest.approx(-0.25)
    assert lp.grad.tolist() == [[0.0, -0.25, 0.25, 0.0]]
    assert stats["cov_affected_frac"].item() == 0.5
    # clip_ratio 0.25 → one of tokens {0, 3} at random; the other keeps its gradient
    lp.grad = None
    loss, _ = clip_cov(lp, LP, ADV, MASK, clip_ratio=0.25, generator=torch.Generator().manual_seed(0))
    loss.backward()
    zeroed = [i for i in range(4) if lp.grad[0, i].item() == 0.0]
    assert len(zeroed) == 1 and zeroed[0] in (0, 3)


def test_kl_cov_penalises_top_covariance_token():
    # old = θ except token 0: log r0 = 0.1 → ratio e^0.1 = 1.105171
    # k = 0.25 → ⌊0.25·4⌋ = 1 token: the largest Cov, token 0 → penalty β·|0.1| with β = 1
    # surrogate = [3·1.105171 − 0.1, 1, −1, −2] = [3.215513, 1, −1, −2] → loss = −1.215513/4 = −0.303878
    old = LP.clone()
    old[0, 0] = -1.1
    loss, stats = kl_cov(LP, old, ADV, MASK, k=0.25, coef=1.0)
    assert loss.item() == pytest.approx(-(3 * math.exp(0.1) - 0.1 + 1 - 1 - 2) / 4)
    assert stats["cov_affected_frac"].item() == 0.25
    # k = 0 → plain surrogate
    plain, _ = kl_cov(LP, old, ADV, MASK, k=0.0)
    assert plain.item() == pytest.approx(-(3 * math.exp(0.1) + 1 - 1 - 2) / 4)


def test_gradcheck_covariance_losses():
    # Clip-Cov stops the gradient of its selected tokens on purpose, so the finite-difference check
    # holds those tokens at their values (the selection is unchanged by a 1e-6 nudge) and checks the rest.
    torch.manual_seed(4)
    old = torch.randn(2, 6, dtype=D) - 2
    x0 = old + 0.2 * torch.randn(2, 6, dtype=D)
    adv = torch.randn(2, 6, dtype=D)
    mask = torch.tensor([[1, 1, 1, 1, 0, 1], [1, 0, 1, 1, 1, 1]])
    kw = dict(clip_ratio=0.2, cov_low=0.0, cov_high=10.0)
    sel = clip_cov_selection(x0, adv, mask, **kw, generator=torch.Generator().manual_seed(1))
    assert int(sel.sum()) == 2  # ⌊0.2·10⌋
    assert torch.autograd.gradcheck(
        lambda x: clip_cov(torch.where(sel, x0, x), old, adv, mask, **kw, generator=torch.Generator().manual_seed(1))[0],
        (x0.clone().requires_grad_(),))
    # and at the selected tokens the real gradient is exactly zero
    x = x0.clone().requires_grad_()
    clip_cov(x, old, adv, mask, **kw, generator=torch.Generator().manual_seed(1))[0].backward()
    assert x.grad[sel].abs().max().item() == 0.0 and x.grad[mask.bool() & ~sel].abs().min().item() > 0
    # KL-Cov has no stop-gradient: a plain check (|log r| is smooth away from r = 1)
    assert torch.autograd.gradcheck(lambda x: kl_cov(x, old, adv, mask, k=0.2, coef=0.5, clip_low=0.2, clip_high=0.28)[0],
                                    (x0.clone().requires_grad_(),))


def test_mopd_loss_by_hand():
    # train log π = −1 at three tokens; inference log π = [−1, −1 − ln 3, −1 + ln 2] → ratios [1, 3, 0.5]
    # ratio 3 is outside [0.5, 2] → dropped; 0.5 is on the bound → kept.
    # teacher [−0.5, −2, −1.5] → A = teacher − train = [0.5, −1, −0.5]
    # loss = −(1·0.5 + 0.5·(−0.5)) / 2 kept tokens = −0.125
    lp = torch.full((1, 3), -1.0, dtype=D, requires_grad=True)
    inf = torch.tensor([[-1.0, -1.0 - math.log(3), -1.0 + math.log(2)]], dtype=D)
    teacher = torch.tensor([[-0.5, -2.0, -1.5]], dtype=D)
    loss, stats = mopd_loss(lp, inf, teacher, torch.ones(1, 3))
    assert loss.item() == pytest.approx(-0.125)
    assert stats["kept_frac"].item() == pytest.approx(2 / 3)
    assert stats["reverse_kl"].item() == pytest.approx((-0.5 + 1 + 0.5) / 3)
    loss.backward()
    # d/dlogπ of −ratio·A/2 = −ratio·A/2 (A is stop-gradient): [−0.25, 0 (dropped), +0.125]
    assert lp.grad.tolist() == [[pytest.approx(-0.25), 0.0, pytest.approx(0.125)]]


def test_gradcheck_mopd_loss():
    # A = stopgrad(log π_T − log π_θ) is constant for the gradient by design; to finite-difference the
    # intended gradient, pass a teacher that moves with x so that A stays fixed at its value at x0.
    torch.manual_seed(5)
    inf = torch.randn(2, 4, dtype=D) - 1
    x0 = inf + 0.1 * torch.randn(2, 4, dtype=D)
    teacher = torch.randn(2, 4, dtype=D) - 1
    mask = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 0]])
    for agg in ("token", "sequence"):
        assert torch.autograd.gradcheck(
            lambda x, agg=agg: mopd_loss(x, inf, x + (teacher - x0), mask, aggregation=agg)[0],
            (x0.clone().requires_grad_(),))
