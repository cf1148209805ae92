"""MAGIC entropy controller, the entropy bonus, and unbiased pass@k."""

import math
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerl.algorithms.entropy_control import MagicEntropyController, entropy_bonus
from tracerl.algorithms.passk import pass_at_k


def test_magic_controller_by_hand():
    # H* = 0.2, Δ = 0.005, c0 = 0.  Entropies [0.1, 0.1, 0.1, 0.3, 0.1]:
    # k0: H<H* → α0 = c0 = 0,     c1 = 0.005
    # k1: H<H* → α1 = 0.005,      c2 = 0.010
    # k2: H<H* → α2 = 0.010,      c3 = 0.015
    # k3: H>H* → α3 = 0 (inactive above target), c4 = 0.010
    # k4: H<H* → α4 = 0.010,      c5 = 0.015
    ctl = MagicEntropyController(target=0.2, delta=0.005)
    alphas = [ctl.step(h) for h in (0.1, 0.1, 0.1, 0.3, 0.1)]
    assert alphas == pytest.approx([0.0, 0.005, 0.010, 0.0, 0.010])
    assert ctl.coef == pytest.approx(0.015)
    # at exactly H* the coefficient is active and does not move
    before = ctl.coef
    assert ctl.step(0.2) == pytest.approx(before) and ctl.coef == before


def test_magic_controller_has_no_floor_unless_asked():
    # faithful to the report: above target for two steps drives c negative, which is then applied below target
    ctl = MagicEntropyController()
    ctl.step(0.5), ctl.step(0.5)
    assert ctl.step(0.1) == pytest.approx(-0.010)
    floored = MagicEntropyController(floor=0.0)
    floored.step(0.5), floored.step(0.5)
    assert floored.step(0.1) == 0.0


def test_magic_controller_state_round_trip():
    a = MagicEntropyController(delta=0.01)
    for h in (0.1, 0.1, 0.05):
        a.step(h)
    b = MagicEntropyController()
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict() and b.steps == 3
    assert [b.step(h) for h in (0.1, 0.3, 0.1)] == [a.step(h) for h in (0.1, 0.3, 0.1)]


def test_entropy_bonus_by_hand_and_gradcheck():
    # entropies [1, 3, (masked 9)] → token mean 2; coef 0.01 → loss −0.02
    ent = torch.tensor([[1.0, 3.0, 9.0]], dtype=torch.float64, requires_grad=True)
    loss, stats = entropy_bonus(ent, torch.tensor([[1, 1, 0]]), coef=0.01)
    assert loss.item() == pytest.approx(-0.02) and stats["entropy"].item() == pytest.approx(2.0)
    assert torch.autograd.gradcheck(lambda e: entropy_bonus(e, torch.tensor([[1, 1, 0]]), coef=0.3)[0], (ent,))


def test_pass_at_k_by_hand():
    # n=10, c=3, k=1 → 1 − C(7,1)/C(10,1) = 1 − 7/10 = 0.3
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    # n=5, c=2, k=2 → 1 − C(3,2)/C(5,2) = 1 − 3/10 = 0.7
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # n − c = 2 < k: every 3-subset holds a correct sample
    for bad in ((5, 6, 1), (5, 1, 6), (0, 0, 1), (5, 1, 0)):
        with pytest.raises(ValueError):
            pass_at_k(*bad)
    # integer-likes from numpy / torch counts are accepted; a fractional count is not
    import numpy as np

    assert pass_at_k(np.int64(10), torch.tensor(3), 1) == pytest.approx(0.3)
    with pytest.raises(TypeError):
        pass_at_k(10, 2.5, 1)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_matches_exact_binomials(nck):
    n, c, k = nck
    exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12)
