"""GAE: the worked example, bootstrap conventions, masks, decoupled/VAPO lambdas, and vectorised ≡ loop."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerl.algorithms.advantages import gae, gae_decoupled, length_adaptive_lambda, vapo_gae

D = torch.float64


def test_worked_example_gamma_lambda_one():
    # residuals: δ0 = 0 + 0.5 - 0.2 = 0.3, δ1 = 0 + 0.6 - 0.5 = 0.1, δ2 = 1 + 0 - 0.6 = 0.4 (terminal: V3 = 0)
    # advantages backward: A2 = 0.4, A1 = 0.1 + 0.4 = 0.5, A0 = 0.3 + 0.5 = 0.8; returns = A + V = [1, 1, 1]
    adv, ret = gae(torch.tensor([[0.0, 0.0, 1.0]], dtype=D), torch.tensor([[0.2, 0.5, 0.6]], dtype=D),
                   torch.ones(1, 3), gamma=1.0, lam=1.0)
    torch.testing.assert_close(adv, torch.tensor([[0.8, 0.5, 0.4]], dtype=D))
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 1.0]], dtype=D))


def test_discount_and_lambda_by_hand():
    # γ=0.5, λ=0.5, rewards [0, 1], values [1, 2], terminal
    # δ1 = 1 + 0 - 2 = -1;  δ0 = 0 + 0.5·2 - 1 = 0;  A1 = -1;  A0 = δ0 + γλ·A1 = 0 - 0.25 = -0.25
    adv, ret = gae(torch.tensor([[0.0, 1.0]], dtype=D), torch.tensor([[1.0, 2.0]], dtype=D), torch.ones(1, 2),
                   gamma=0.5, lam=0.5)
    torch.testing.assert_close(adv, torch.tensor([[-0.25, -1.0]], dtype=D))
    torch.testing.assert_close(ret, torch.tensor([[0.75, 1.0]], dtype=D))


def test_truncated_row_bootstraps_and_terminal_row_does_not():
    # same row twice; row 0 ended naturally (V_next = 0), row 1 was cut off with V(s_next) = 0.9
    # row 0: δ = 0 + 0 - 0.5 = -0.5;  row 1: δ = 0 + 1·0.9 - 0.5 = 0.4
    r, v = torch.zeros(2, 1, dtype=D), torch.full((2, 1), 0.5, dtype=D)
    adv, _ = gae(r, v, torch.ones(2, 1), gamma=1.0, lam=1.0, bootstrap_values_B=torch.tensor([0.9, 0.9], dtype=D),
                 truncated_B=torch.tensor([False, True]))
    torch.testing.assert_close(adv, torch.tensor([[-0.5], [0.4]], dtype=D))


def test_observation_tokens_are_skipped_not_treated_as_steps():
    # action, observation, action: the observation's (garbage) value and reward must not enter.
    # equals the two-step trace with rewards [0, 1], values [0.2, 0.6]: A1 = 0.4, A0 = 0 + 0.6 - 0.2 + 0.4 = 0.8
    adv, ret = gae(torch.tensor([[0.0, 99.0, 1.0]], dtype=D), torch.tensor([[0.2, -7.0, 0.6]], dtype=D),
                   torch.tensor([[1, 0, 1]]), gamma=1.0, lam=1.0)
    torch.testing.assert_close(adv, torch.tensor([[0.8, 0.0, 0.4]], dtype=D))
    torch.testing.assert_close(ret, torch.tensor([[1.0, 0.0, 1.0]], dtype=D))


def test_decoupled_lambdas_and_vapo_length_adaptive_lambda():
    r = torch.tensor([[0.0, 0.0, 1.0]], dtype=D)
    v = torch.tensor([[0.2, 0.5, 0.6]], dtype=D)
    m = torch.ones(1, 3)
    adv, ret = gae_decoupled(r, v, m, gamma=1.0, lam_policy=0.5, lam_value=1.0)
    # λ=0.5: A2 = 0.4, A1 = 0.1 + 0.5·0.4 = 0.3, A0 = 0.3 + 0.5·0.3 = 0.45; returns use λ=1 → [1,1,1]
    torch.testing.assert_close(adv, torch.tensor([[0.45, 0.3, 0.4]], dtype=D))
    torch.testing.assert_close(ret, torch.ones(1, 3, dtype=D))
    # λ = 1 − 1/(α·l): α=0.5, l=4 → 1 − 1/2 = 0.5; l=100 → 0.98; l=1 → 1 − 2 < 0 → clamped to 0
    torch.testing.assert_close(length_adaptive_lambda(torch.tensor([4, 100, 1]), alpha=0.5),
                               torch.tensor([0.5, 0.98, 0.0]))
    # VAPO with α = 2/3 on l = 3 → λ = 1 − 1/2 = 0.5: same numbers as above
    adv2, ret2 = vapo_gae(r, v, m, alpha=2 / 3)
    torch.testing.assert_close(adv2, adv)
    torch.testing.assert_close(ret2, ret)


def plain_gae(rewards, values, mask, gamma, lam, bootstrap=0.0):
    """Reference: collect the selected steps of one row in a list, run the textbook backward loop."""
    steps = [t for t, m in enumerate(mask) if m]
    adv = [0.0] * len(rewards)
    next_v, next_a = bootstrap, 0.0
    for t in reversed(steps):
        delta = rewards[t] + gamma * next_v - values[t]
        next_a = delta + gamma * lam * next_a
        adv[t] = next_a
        next_v = values[t]
    return adv, [a + values[t] if mask[t] else 0.0 for t, a in enumerate(adv)]


row = st.integers(1, 7).flatmap(lambda n: st.tuples(
    st.lists(st.floats(-2, 2, allow_nan=False), min_size=n, max_size=n),
    st.lists(st.floats(-2, 2, allow_nan=False), min_size=n, max_size=n),
    st.lists(st.booleans(), min_size=n, max_size=n),
    st.floats(-1, 1, allow_nan=False), st.booleans()))


@settings(max_examples=60, deadline=None)
@given(st.lists(row, min_size=1, max_size=4), st.floats(0, 1), st.floats(0, 1))
def test_vectorised_gae_equals_plain_python_loop(rows, gamma, lam):
    T = max(len(r[0]) for r in rows)
    pad = lambda xs, fill: list(xs) + [fill] * (T - len(xs))  # noqa: E731
    rewards = torch.tensor([pad(r[0], 0.0) for r in rows], dtype=D)
    values = torch.tensor([pad(r[1], 0.0) for r in rows], dtype=D)
    mask = torch.tensor([pad(r[2], False) for r in rows])
    boot = torch.tensor([r[3] for r in rows], dtype=D)
    trunc = torch.tensor([r[4] for r in rows])
    adv, ret = gae(rewards, values, mask, gamma=gamma, lam=lam, bootstrap_values_B=boot, truncated_B=trunc)
    for b, r in enumerate(rows):
        exp_adv, exp_ret = plain_gae(pad(r[0], 0.0), pad(r[1], 0.0), pad(r[2], False), gamma, lam,
                                     bootstrap=r[3] if r[4] else 0.0)
        assert adv[b].tolist() == pytest.approx(exp_adv, abs=1e-9)
        assert ret[b].tolist() == pytest.approx(exp_ret, abs=1e-9)


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="equal"):
        gae(torch.zeros(1, 3), torch.zeros(1, 2), torch.ones(1, 3), gamma=1.0, lam=1.0)
