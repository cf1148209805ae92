"""Clipped policy loss: worked example, clip asymmetry, aggregations, Level-0 mask checks, gradcheck."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerl.algorithms.losses import aggregate, policy_loss

D = torch.float64


def _lp(ratios):
    return torch.log(torch.tensor(ratios, dtype=D))


def test_worked_example_from_design_literature():
    # advantages [1,-1,1,-1]; ratios [1.10,0.90,1.20,0.80]; clip 0.2 → interval [0.8, 1.2]
    # every ratio is inside or on a bound, so selected terms = ratio·A = [1.10,-0.90,1.20,-0.80]
    # mean = (1.10-0.90+1.20-0.80)/4 = 0.60/4 = 0.15 → loss to minimise = -0.15
    logprobs = _lp([[1.10], [0.90], [1.20], [0.80]])
    loss, stats = policy_loss(logprobs, torch.zeros(4, 1, dtype=D), torch.tensor([1.0, -1, 1, -1], dtype=D),
                              torch.ones(4, 1), clip_low=0.2, clip_high=0.2)
    assert loss.item() == pytest.approx(-0.15, abs=1e-12)
    assert stats["clip_frac_low"].item() == 0.0 and stats["clip_frac_high"].item() == 0.0
    assert stats["ratio_min"].item() == pytest.approx(0.8) and stats["ratio_max"].item() == pytest.approx(1.2)
    # quantiles of sorted ratios [0.8, 0.9, 1.1, 1.2] with linear interpolation at q·(n−1):
    # q10 at 0.3 → 0.8 + 0.3·0.1 = 0.83; q50 at 1.5 → 1.0; q90 at 2.7 → 1.1 + 0.7·0.1 = 1.17
    assert [stats[k].item() for k in ("ratio_q10", "ratio_q50", "ratio_q90")] == pytest.approx([0.83, 1.0, 1.17])
    # approx_kl (k3 of old vs new) = mean((r-1) - log r) over [1.1,.9,1.2,.8]
    k3 = sum((r - 1) - math.log(r) for r in (1.1, 0.9, 1.2, 0.8)) / 4
    assert stats["approx_kl"].item() == pytest.approx(k3, rel=1e-9)


def test_asymmetric_clip_acts_on_the_specified_side():
    # clip_low=0.2, clip_high=0.28 → interval [0.8, 1.28]
    # A=+1, r=1.5 → min(1.5, 1.28) = 1.28 (clipped high)     A=+1, r=0.5 → min(0.5, 0.8) = 0.5 (not clipped)
    # A=-1, r=0.5 → min(-0.5, -0.8) = -0.8 (clipped low)     A=-1, r=1.5 → min(-1.5, -1.28) = -1.5 (not clipped)
    # A=+1, r=1.25 → 1.25 (inside clip-higher; symmetric 0.2 would have cut it to 1.2)
    ratios = [[1.5], [0.5], [0.5], [1.5], [1.25]]
    adv = torch.tensor([1.0, 1, -1, -1, 1], dtype=D)
    loss, stats = policy_loss(_lp(ratios), torch.zeros(5, 1, dtype=D), adv, torch.ones(5, 1),
                              clip_low=0.2, clip_high=0.28)
    # mean of [1.28, 0.5, -0.8, -1.5, 1.25] = 0.73/5 = 0.146
    assert loss.item() == pytest.approx(-0.146, abs=1e-12)
    assert stats["clip_frac_high"].item() == pytest.approx(1 / 5)
    assert stats["clip_frac_low"].item() == pytest.approx(1 / 5)
    sym, _ = policy_loss(_lp(ratios), torch.zeros(5, 1, dtype=D), adv, torch.ones(5, 1), clip_low=0.2, clip_high=0.2)
    # symmetric: [1.2, 0.5, -0.8, -1.5, 1.2] → 0.6/5 = 0.12
    assert sym.item() == pytest.approx(-0.12, abs=1e-12)


def test_clipped_tokens_get_no_gradient():
    logprobs = _lp([[1.5, 0.5, 1.1]]).requires_grad_()
    adv = torch.tensor([[1.0, -1.0, 1.0]], dtype=D)
    loss, _ = policy_loss(logprobs, torch.zeros(1, 3, dtype=D), adv, torch.ones(1, 3), clip_low=0.2, clip_high=0.2)
    loss.backward()
    # token 0 clipped high (A>0), token 1 clipped low (A<0): zero grad; token 2: d(-r·A/3)/dlogp = -1.1/3
    assert logprobs.grad[0, 0].item() == 0.0 and logprobs.grad[0, 1].item() == 0.0
    assert logprobs.grad[0, 2].item() == pytest.approx(-1.1 / 3)


def test_dual_clip_bounds_negative_advantage():
    # A=-1, r=5 → PPO min(-5, -1.2) = -5; dual clip c=3 → max(-5, -3) = -3
    loss, stats = policy_loss(_lp([[5.0]]), torch.zeros(1, 1, dtype=D), torch.tensor([-1.0], dtype=D),
                              torch.ones(1, 1), clip_low=0.2, clip_high=0.2, dual_clip=3.0)
    assert loss.item() == pytest.approx(3.0)
    assert stats["dual_clip_frac"].item() == 1.0


LOSS_BT = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0]], dtype=D)
MASK_BT = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])


def test_three_aggregations_by_hand():
    # token: (1+2+3+4)/4 = 2.5;  sequence: mean(6/3, 4/1) = (2+4)/2 = 3;  fixed L_max=5: 10/(2·5) = 1
    assert aggregate(LOSS_BT, MASK_BT, "token").item() == pytest.approx(2.5)
    assert aggregate(LOSS_BT, MASK_BT, "sequence").item() == pytest.approx(3.0)
    assert aggregate(LOSS_BT, MASK_BT, "fixed", max_len=5).item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="max_len"):
        aggregate(LOSS_BT, MASK_BT, "fixed")
    with pytest.raises(ValueError, match="aggregation"):
        aggregate(LOSS_BT, MASK_BT, "mean")


def _check_token_global(agg):
    assert agg(LOSS_BT, MASK_BT) == pytest.approx(2.5), "token-global denominator is Σ mask = 4"


def test_a_wrong_denominator_fails_the_check():
    # Level-0: the hand check above must catch a wrong denominator, e.g. per-sequence or padded width
    _check_token_global(lambda l, m: aggregate(l, m, "token").item())
    with pytest.raises(AssertionError):
        _check_token_global(lambda l, m: aggregate(l, m, "sequence").item())
    with pytest.raises(AssertionError):
        _check_token_global(lambda l, m: (l * m).sum().item() / l.numel())  # divides by B·T = 8


def test_padding_and_observation_positions_get_exactly_zero_gradient():
    # positions: prompt | action action | observation | action | pad, with NaN old log-probs off-mask
    mask = torch.tensor([[0, 1, 1, 0, 1, 0]])
    logprobs = torch.tensor([[-1.0, -0.5, -0.7, -2.0, -0.3, -9.0]], dtype=D, requires_grad=True)
    old = torch.tensor([[float("nan"), -0.6, -0.6, float("nan"), -0.4, float("nan")]], dtype=D)
    for agg in ("token", "sequence", "fixed"):
        logprobs.grad = None
        loss, _ = policy_loss(logprobs, old, torch.tensor([0.7], dtype=D), mask, clip_low=0.2, clip_high=0.28,
                              aggregation=agg, max_len=8)
        loss.backward()
        assert torch.isfinite(loss)
        g = logprobs.grad[0]
        assert g[0].item() == 0.0 and g[3].item() == 0.0 and g[5].item() == 0.0
        assert all(g[i].item() != 0.0 for i in (1, 2, 4))


def test_gradcheck_policy_loss_all_aggregations():
    torch.manual_seed(0)
    old = torch.randn(3, 5, dtype=D) * 0.1 - 1.0
    # ratios kept away from the clip kinks, where the loss is not differentiable
    logprobs = (old + torch.tensor([0.05, -0.05, 0.5, -0.5, 0.0], dtype=D)).requires_grad_()
    adv = torch.tensor([[1.0, -1.0, 0.5, -0.5, 2.0]] * 3, dtype=D)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 1, 1, 1, 0]])
    for agg in ("token", "sequence", "fixed"):
        def f(lp, agg=agg):
            return policy_loss(lp, old, adv, mask, clip_low=0.2, clip_high=0.28, aggregation=agg, max_len=6,
                               dual_clip=3.0)[0]
        assert torch.autograd.gradcheck(f, (logprobs,))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-2, 2, allow_nan=False), min_size=2, max_size=8), st.integers(1, 7),
       st.floats(-2, 2, allow_nan=False))
def test_splitting_an_action_span_leaves_token_loss_unchanged(deltas, cut, adv):
    # Level-0: one action span [a..b] vs two spans [a..c],[c+1..b] separated by an observation token
    # (masked out): the token-global loss sees the same selected tokens, so it is unchanged.
    n = len(deltas)
    cut = 1 + cut % (n - 1)
    old = torch.full((1, n), -1.0, dtype=D)
    lp = old + torch.tensor([deltas], dtype=D)
    one, _ = policy_loss(lp, old, torch.tensor([adv], dtype=D), torch.ones(1, n), clip_low=0.2, clip_high=0.28)
    obs = torch.tensor([[-3.0]], dtype=D)
    lp2 = torch.cat([lp[:, :cut], obs, lp[:, cut:]], dim=1)
    old2 = torch.cat([old[:, :cut], obs, old[:, cut:]], dim=1)
    mask2 = torch.cat([torch.ones(1, cut), torch.zeros(1, 1), torch.ones(1, n - cut)], dim=1)
    two, _ = policy_loss(lp2, old2, torch.tensor([adv], dtype=D), mask2, clip_low=0.2, clip_high=0.28)
    assert two.item() == pytest.approx(one.item(), abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1, 1, allow_nan=False), min_size=1, max_size=6), st.floats(-3, 3, allow_nan=False))
def test_on_policy_loss_is_minus_mean_advantage(deltas, adv):
    # ratio 1 everywhere → surrogate = A at each token → token loss = -A, no clipping
    old = torch.tensor([deltas], dtype=D)
    loss, stats = policy_loss(old.clone(), old, torch.tensor([adv], dtype=D), torch.ones_like(old),
                              clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(-adv, abs=1e-12)
    assert stats["approx_kl"].item() == 0.0 and stats["clip_frac_low"].item() == 0.0
