"""GSPO (Zheng et al. 2025): sequence ratio, sequence clip, loss value and per-token gradients, by hand."""

import math

import pytest
import torch

from tracerl.algorithms.losses import gspo_loss, policy_loss
from tracerl.algorithms.spec import ALGORITHMS
from tracerl.config import load_recipe

NAN = float("nan")


def _two_rows():
    """Row 0: two action tokens. Row 1: a multi-turn row, action, OBSERVATION, action, action, pad.

    log π_θ − log π_old on the action tokens: row 0 [0.1, 0.3]; row 1 [−0.03, −0.01, −0.02]. The observation
    position has a NaN behavior log-prob (the contract puts NaN off ACTION) and a log π_θ of −5 that must
    not count."""
    old = torch.tensor([[-1.0, -2.0, NAN, NAN, NAN],
                        [-1.0, NAN, -0.5, -0.7, NAN]])
    new = torch.tensor([[-0.9, -1.7, 0.0, 0.0, 0.0],
                        [-1.03, -5.0, -0.51, -0.72, 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 0.0],
                         [1.0, 0.0, 1.0, 1.0, 0.0]])
    adv = torch.tensor([[1.0], [-1.0]]) * mask  # group-normalised outcome advantages, broadcast
    return new, old, adv, mask


@pytest.mark.parametrize("variant", ["sequence", "token"])
def test_gspo_ratio_clip_loss_and_equal_token_weights(variant):
    new, old, adv, mask = _two_rows()
    loss, stats = gspo_loss(new, old, adv, mask, clip_low=0.1, clip_high=0.1, variant=variant)
    # s_0 = exp((0.1 + 0.3)/2) = e^0.2 = 1.221403 > 1.1 with A = +1: clipped, ℓ_0 = min(1.2214, 1.1) = 1.1
    # s_1 = exp((−0.03 − 0.01 − 0.02)/3) = e^−0.02 = 0.980199 in [0.9, 1.1]: ℓ_1 = −0.980199
    # loss = −(1.1 − 0.980199)/2 = −0.0599005
    s1 = math.exp(-0.02)
    assert loss.item() == pytest.approx(-(1.1 - s1) / 2, abs=1e-6)
    assert stats["seq_ratio_max"].item() == pytest.approx(math.exp(0.2), abs=1e-6)
    assert stats["seq_ratio_min"].item() == pytest.approx(s1, abs=1e-6)
    assert stats["clip_frac_high"].item() == 0.5 and stats["clip_frac_low"].item() == 0.0
    loss.backward()
    # row 0 clipped → 0 on both tokens; row 1: −(1/2)·A·s_1·(1/3) = s_1/6 = 0.163367 on EACH action token
    # (the same weight, whatever the token's own ratio), 0 at the observation and the padding
    expect = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0], [s1 / 6, 0.0, s1 / 6, s1 / 6, 0.0]])
    assert torch.allclose(new.grad, expect, atol=1e-6)


def test_gspo_unclipped_gradient_and_ppo_differs():
    new, old, adv, mask = _two_rows()
    loss, _ = gspo_loss(new, old, adv, mask, clip_low=0.4, clip_high=0.4)
    # nothing clipped: loss = −(e^0.2 − e^−0.02)/2; row 0's tokens each get −(1/2)·1·e^0.2·(1/2) = −0.305351
    assert loss.item() == pytest.approx(-(math.exp(0.2) - math.exp(-0.02)) / 2, abs=1e-6)
    loss.backward()
    g0 = -math.exp(0.2) / 4
    assert new.grad[0, 0].item() == pytest.approx(g0, abs=1e-6) and new.grad[0, 1].item() == pytest.approx(g0, abs=1e-6)
    # token-level PPO (e^0.3 = 1.35 < 1.4: unclipped) weighs row 0's tokens by their own ratios e^0.1, e^0.3: different gradients
    new2 = new.detach().clone().requires_grad_(True)
    policy_loss(new2, old, adv, mask, clip_low=0.4, clip_high=0.4, aggregation="sequence")[0].backward()
    assert new2.grad[0, 0].item() == pytest.approx(-math.exp(0.1) / 4, abs=1e-6)
    assert new2.grad[0, 1].item() == pytest.approx(-math.exp(0.3) / 4, abs=1e-6)


def test_paper_clip_ranges_clip_at_the_sequence_level():
    # ε_low 3e-4, ε_high 4e-4. Row 0: mean log-ratio 1e-3 → s = 1.0010005 > 1.0004, A > 0: clipped.
    # Row 1: token log-ratios +0.3 and −0.2996 (a token PPO would clip at ±0.2) average to 2e-4 →
    # s = 1.0002 inside the band: kept, its tokens weighted e^2e-4 / 2 each.
    old = torch.zeros(2, 2)
    new = torch.tensor([[1e-3, 1e-3], [0.3, -0.2996]], requires_grad=True)
    mask, adv = torch.ones(2, 2), torch.ones(2, 2)
    loss, stats = gspo_loss(new, old, adv, mask)
    assert stats["clip_frac_high"].item() == 0.5
    # loss = −(1.0004 + e^2e-4)/2
    assert loss.item() == pytest.approx(-(1.0004 + math.exp(2e-4)) / 2, abs=1e-7)
    loss.backward()
    assert torch.allclose(new.grad, torch.tensor([[0.0, 0.0], [-math.exp(2e-4) / 4] * 2]), atol=1e-7)


def test_gspo_spec_defaults_recipe_and_refusals():
    spec = ALGORITHMS["gspo"]()
    assert (spec.clip_low, spec.clip_high, spec.aggregation) == (3e-4, 4e-4, "sequence")
    with pytest.raises(ValueError, match="decoupled"):
        ALGORITHMS["gspo"](decoupled={})
    with pytest.raises(ValueError, match="correction"):
        ALGORITHMS["gspo"](correction={"kind": "tis"})
    r = load_recipe("gspo")
    assert r.rl.algorithm.name == "gspo" and r.env.name == "math_tool"
    # the recipe is the default recipe but for its name and the algorithm
    d = load_recipe("default")
    assert r.model_dump(exclude={"run", "rl"}) == d.model_dump(exclude={"run", "rl"})
    assert r.rl.model_dump(exclude={"algorithm"}) == d.rl.model_dump(exclude={"algorithm"})
