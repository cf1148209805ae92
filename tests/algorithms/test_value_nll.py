"""Clipped value loss and VAPO's positive-example NLL."""

import pytest
import torch

from tracerl.algorithms.losses import positive_nll, value_loss

D = torch.float64


def test_value_loss_clipping_by_hand():
    # returns 1.0 everywhere, old values [0.5, 0.5], new values [0.9, 0.2], clip 0.2
    # token 0: unclipped (0.9−1)² = 0.01; v_clip = 0.5 + clip(0.4) = 0.7 → (0.7−1)² = 0.09 → max 0.09
    # token 1: unclipped (0.2−1)² = 0.64; v_clip = 0.5 + clip(−0.3) = 0.3 → (0.3−1)² = 0.49 → max 0.64
    # loss = ½ · (0.09 + 0.64)/2 = 0.1825
    v = torch.tensor([[0.9, 0.2]], dtype=D, requires_grad=True)
    loss, stats = value_loss(v, torch.tensor([[0.5, 0.5]], dtype=D), torch.ones(1, 2, dtype=D), torch.ones(1, 2))
    assert loss.item() == pytest.approx(0.1825)
    assert stats["value_clip_frac"].item() == pytest.approx(0.5)
    loss.backward()
    # token 0's clipped branch is flat in v → 0 gradient; token 1: d/dv ½(v−1)²/2 = (0.2−1)/2 = −0.4
    assert v.grad.tolist() == [[0.0, pytest.approx(-0.4)]]
    unclipped, _ = value_loss(v, torch.tensor([[0.5, 0.5]], dtype=D), torch.ones(1, 2, dtype=D), torch.ones(1, 2), clip=None)
    assert unclipped.item() == pytest.approx(0.5 * (0.01 + 0.64) / 2)


def test_value_loss_masks_and_gradcheck():
    torch.manual_seed(3)
    old = torch.randn(2, 4, dtype=D)
    v = (old + torch.tensor([0.05, -0.5, 0.5, 0.1], dtype=D)).requires_grad_()
    ret = torch.randn(2, 4, dtype=D)
    ret[1, 3] = float("nan")  # padding slot
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    loss, _ = value_loss(v, old, ret, mask)
    loss.backward()
    assert torch.isfinite(loss) and v.grad[0, 3].item() == 0.0 and v.grad[1, 3].item() == 0.0
    for agg in ("token", "sequence", "fixed"):
        assert torch.autograd.gradcheck(
            lambda x, agg=agg: value_loss(x, old, ret, mask, clip=0.2, aggregation=agg, max_len=4)[0],
            (v.detach().requires_grad_(),))


def test_positive_nll_only_uses_successful_responses():
    # rewards [1, 0]: only row 0; its selected log-probs [-1, -3] (third masked) → NLL = (1 + 3)/2 = 2
    lp = torch.tensor([[-1.0, -3.0, -50.0], [-0.1, -0.1, -0.1]], dtype=D, requires_grad=True)
    loss, stats = positive_nll(lp, torch.tensor([[1, 1, 0], [1, 1, 1]]), torch.tensor([1.0, 0.0]))
    assert loss.item() == pytest.approx(2.0)
    assert stats["positive_responses"].item() == 1.0
    loss.backward()
    assert lp.grad.tolist() == [[-0.5, -0.5, 0.0], [0.0, 0.0, 0.0]]
    assert torch.autograd.gradcheck(
        lambda x: positive_nll(x, torch.tensor([[1, 1, 0], [1, 1, 1]]), torch.tensor([1.0, 2.0]))[0],
        (lp.detach().requires_grad_(),))


def test_explained_variance_is_undefined_for_constant_returns():
    # every return −0.2 (as on workplace_db when every episode fails the same way): float32 rounding leaves
    # var_t ≈ 1e-15, which gave explained variance ≈ −1e10 on workplace_db; it is NaN (undefined)
    ret = torch.full((2, 3), -0.2) + torch.tensor([[0, 1e-7, 0], [0, 0, -1e-7]])
    v = torch.tensor([[0.01, 0.0, -0.01], [0.02, 0.0, 0.0]])  # a critic that varies a little: 1 − var_r/var_t ≈ −1e14
    _, stats = value_loss(v, v, ret, torch.ones(2, 3))
    assert torch.isnan(stats["explained_variance"])
