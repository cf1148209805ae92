"""Decoupled PPO (AReaL) and the TIS / MIS corrections with effective sample size."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerl.algorithms.losses import decoupled_ppo, effective_sample_size, mis, policy_loss, tis

D = torch.float64


def test_behavior_correction_is_one_when_policies_match():
    # Level-0: π_prox = π_beh → c = 1 and the loss equals the plain clipped loss around π_prox
    torch.manual_seed(0)
    prox = torch.randn(3, 4, dtype=D) - 1
    lp = (prox + 0.3 * torch.randn(3, 4, dtype=D)).requires_grad_()
    adv = torch.tensor([1.0, -0.5, 2.0], dtype=D)
    mask = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 1], [0, 1, 1, 0]])
    dec, stats = decoupled_ppo(lp, prox, prox.clone(), adv, mask, clip_low=0.2, clip_high=0.28)
    ref, _ = policy_loss(lp, prox, adv, mask, clip_low=0.2, clip_high=0.28)
    assert dec.item() == pytest.approx(ref.item(), abs=1e-15)
    assert stats["behavior_weight_mean"].item() == 1.0 and stats["behavior_ess_frac"].item() == pytest.approx(1.0)


def test_decoupled_hand_worked():
    # one token, A = 1: π_beh = 0.2, π_prox = 0.3, π_θ = 0.45
    # c = 0.3/0.2 = 1.5 (outer correction); r = 0.45/0.3 = 1.5 → clip to 1.2 (ε = 0.2)
    # surrogate = 1.5 · min(1.5, 1.2) = 1.8 → loss −1.8.  Clipping π_θ/π_beh = 2.25 instead would give 1.2.
    lp = torch.tensor([[math.log(0.45)]], dtype=D, requires_grad=True)
    loss, stats = decoupled_ppo(lp, torch.tensor([[math.log(0.3)]], dtype=D), torch.tensor([[math.log(0.2)]], dtype=D),
                                torch.tensor([1.0], dtype=D), torch.ones(1, 1), clip_low=0.2, clip_high=0.2)
    assert loss.item() == pytest.approx(-1.8)
    assert stats["clip_frac_high"].item() == 1.0
    # with a behaviour cap of 1.25: 1.25 · 1.2 = 1.5
    capped, _ = decoupled_ppo(lp, torch.tensor([[math.log(0.3)]], dtype=D), torch.tensor([[math.log(0.2)]], dtype=D),
                              torch.tensor([1.0], dtype=D), torch.ones(1, 1), clip_low=0.2, clip_high=0.2, behavior_cap=1.25)
    assert capped.item() == pytest.approx(-1.5)


def test_decoupled_masked_positions_have_zero_gradient_and_gradcheck():
    torch.manual_seed(2)
    beh = torch.randn(2, 5, dtype=D) - 1
    prox = beh + 0.1 * torch.randn(2, 5, dtype=D)
    beh[0, 2] = float("nan")  # an observation slot: behaviour log-prob is NaN by contract
    lp = (prox + torch.tensor([0.05, -0.05, 0.3, -0.3, 0.0], dtype=D)).requires_grad_()
    mask = torch.tensor([[1, 1, 0, 1, 1], [1, 0, 1, 1, 0]])
    adv = torch.tensor([[0.5, -1.0, 1.0, 1.0, -0.5], [1.0, 1.0, -1.0, 2.0, 0.3]], dtype=D)
    loss, _ = decoupled_ppo(lp, prox, beh, adv, mask, clip_low=0.2, clip_high=0.28)
    loss.backward()
    assert lp.grad[0, 2].item() == 0.0 and lp.grad[1, 1].item() == 0.0 and lp.grad[1, 4].item() == 0.0
    for agg in ("token", "sequence", "fixed"):
        assert torch.autograd.gradcheck(
            lambda x, agg=agg: decoupled_ppo(x, prox, beh, adv, mask, clip_low=0.2, clip_high=0.28,
                                             aggregation=agg, max_len=5)[0], (lp.detach().requires_grad_(),))


def test_ess_by_hand():
    # weights [1, 1, 2]: (Σw)² / Σw² = 16 / 6 = 2.6667; fraction 2.6667 / 3 = 0.8889
    out = effective_sample_size(torch.tensor([[1.0, 1.0, 2.0, 100.0]]), torch.tensor([[1, 1, 1, 0]]))
    assert out["ess"].item() == pytest.approx(16 / 6, rel=1e-6)
    assert out["ess_frac"].item() == pytest.approx(16 / 18, rel=1e-6)


def test_tis_truncates_and_mis_drops():
    # train/rollout ratios [0.25, 1.0, 1.5, 3.0] (last masked out in a second check)
    rollout = torch.zeros(1, 4, dtype=D)
    train = torch.log(torch.tensor([[0.25, 1.0, 1.5, 3.0]], dtype=D))
    mask = torch.ones(1, 4)
    w, stats = tis(train, rollout, mask, cap=2.0)
    # TIS: min(ratio, 2) = [0.25, 1, 1.5, 2]; one of four truncated
    torch.testing.assert_close(w, torch.tensor([[0.25, 1.0, 1.5, 2.0]], dtype=D))
    assert stats["tis_truncated_frac"].item() == pytest.approx(0.25)
    w, keep, stats = mis(train, rollout, mask, low=0.5, high=2.0)
    # MIS: 0.25 < 0.5 and 3.0 > 2 leave the band → dropped; kept weights [0, 1, 1.5, 0]
    torch.testing.assert_close(w, torch.tensor([[0.0, 1.0, 1.5, 0.0]], dtype=D))
    assert keep.tolist() == [[0.0, 1.0, 1.0, 0.0]]
    assert stats["mis_dropped_frac"].item() == pytest.approx(0.5)
    # ESS over kept weights [1, 1.5]: 6.25 / 3.25 = 1.923
    assert stats["ess"].item() == pytest.approx(6.25 / 3.25, rel=1e-6)


def test_mis_weights_plug_into_policy_loss():
    # on-policy θ = old, A = 1 on 2 tokens; MIS keeps only token 0 (weight 1.2) → loss = −1.2·1/1
    lp = torch.zeros(1, 2, dtype=D)
    rollout = torch.log(torch.tensor([[1 / 1.2, 1 / 5.0]], dtype=D))
    w, keep, _ = mis(lp, rollout, torch.ones(1, 2))
    loss, _ = policy_loss(lp, lp, torch.tensor([1.0], dtype=D), keep, clip_low=0.2, clip_high=0.2, weights_BT=w)
    assert loss.item() == pytest.approx(-1.2)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-3, 3, allow_nan=False), min_size=1, max_size=10))
def test_ess_is_between_one_and_n(log_w):
    w = torch.tensor([log_w], dtype=D).exp()
    out = effective_sample_size(w, torch.ones_like(w))
    assert 1 - 1e-6 <= out["ess"].item() <= len(log_w) + 1e-4


def test_decoupled_ppo_with_tis_weights():
    # behaviour = prox (c = 1), θ = prox, A = 1 on two tokens; rollout engine disagreed on token 1 by ×3
    # TIS cap 2 → weights [1, 2]; surrogate = w·r·A = [1, 2] → loss = −3/2
    prox = torch.tensor([[-1.0, -2.0]], dtype=D)
    w, _ = tis(prox, prox - torch.tensor([[0.0, math.log(3)]], dtype=D), torch.ones(1, 2), cap=2.0)
    loss, _ = decoupled_ppo(prox.clone(), prox, prox, torch.tensor([1.0], dtype=D), torch.ones(1, 2),
                            clip_low=0.2, clip_high=0.2, weights_BT=w)
    assert loss.item() == pytest.approx(-1.5)


def test_decoupled_clip_cov_and_kl_cov_centre_on_proximal_and_weight_by_behavior():
    # rl.mode async with Clip-Cov / KL-Cov (the spec sets `decoupled`): the surrogate is the variant's own,
    # its ratio centred on π_prox, each token weighted by c = π_prox/π_beh. One token, A = 1, no clipping in
    # range: π_beh = 0.2, π_prox = 0.3, π_θ = 0.33 → c = 1.5, r = 1.1, loss = −c·r·A = −1.65 (token mean).
    from tracerl.algorithms.batch import collate
    from tracerl.algorithms.spec import ALGORITHMS, PolicyOutput, StepContext
    from tracerl.contract import TerminalReason, TokenRole, Trajectory

    t = Trajectory(trajectory_id="t", group_id="g", task_id="x", env_name="e")
    t.append([5, 6], TokenRole.PROMPT)
    s, e = t.append([7], TokenRole.ACTION, logprobs=[math.log(0.2)], policy_version=0)
    t.add_span("action", s, e)
    t.set_reward({"r": 1.0}, {"r": 1.0})
    t.finish(TerminalReason.EOS)
    mb = collate([t], pad_id=0)
    lp = torch.zeros_like(mb.behavior_BT)
    lp[0, 2] = math.log(0.33)
    prox = torch.zeros_like(mb.behavior_BT)
    prox[0, 2] = math.log(0.3)
    adv = mb.mask_BT.clone().float()
    for variant in ({"clip_cov": {"ratio": 1e-9}}, {"kl_cov": {"k": 1e-9}}):  # no token selected by either
        algo = ALGORITHMS["grpo"](decoupled={}, kl={"coef": 0.0}, **variant)
        loss, _ = algo.loss(mb, PolicyOutput(logprobs_BT=lp, full_logprobs_BT=lp, entropy_BT=torch.zeros_like(lp)),
                            {"proximal": prox}, adv, mb.reward_B, StepContext(max_tokens=8))
        assert loss.item() == pytest.approx(-1.5 * 1.1, rel=1e-5), variant
        plain = ALGORITHMS["grpo"](kl={"coef": 0.0}, **variant)  # sync: r = 0.33/0.2 = 1.65, clipped at 1.28
        loss, _ = plain.loss(mb, PolicyOutput(logprobs_BT=lp, full_logprobs_BT=lp, entropy_BT=torch.zeros_like(lp)),
                             {}, adv, mb.reward_B, StepContext(max_tokens=8))
        assert loss.item() == pytest.approx(-1.28, rel=1e-5), variant
