"""Importance-weight and policy-movement calculators against hand arithmetic."""

import math

import numpy as np
import pytest

from tracerl.telemetry.importance import clip_fractions, ess, ess_fraction, importance_metrics, k3_kl, quantiles


def test_ess_of_known_weights():
    # w = [1, 1, 2, 0]: Σw = 4, Σw² = 1 + 1 + 4 + 0 = 6, ESS = 16 / 6 = 8/3, fraction = (8/3) / 4 = 2/3
    assert ess([1, 1, 2, 0]) == pytest.approx(8 / 3)
    assert ess_fraction([1, 1, 2, 0]) == pytest.approx(2 / 3)
    # equal weights: (3·3)² / (3·9) = 81 / 27 = 3 = N, fraction 1
    assert ess([3, 3, 3]) == pytest.approx(3.0)
    assert ess_fraction([3, 3, 3]) == pytest.approx(1.0)
    # one token carries all the mass: 1² / 1 = 1, fraction 1/4
    assert ess([0, 5, 0, 0]) == pytest.approx(1.0)
    assert ess_fraction([0, 5, 0, 0]) == pytest.approx(0.25)
    assert math.isnan(ess([])) and math.isnan(ess([0, 0]))


def test_clip_fractions_active_and_band():
    ratio = [0.7, 0.9, 1.1, 1.5, 1.5, 0.5]
    adv = [-1, -1, 1, 1, -1, 1]
    # band [1 - 0.2, 1 + 0.28] = [0.8, 1.28]
    # below: 0.7 (A<0, clip cuts the gradient) and 0.5 (A>0, the min() keeps the unclipped term)
    # above: 1.5 with A>0 (cut) and 1.5 with A<0 (not cut)
    low, high = clip_fractions(ratio, adv, clip_low=0.2, clip_high=0.28)
    assert (low, high) == (pytest.approx(1 / 6), pytest.approx(1 / 6))
    low, high = clip_fractions(ratio, None, clip_low=0.2, clip_high=0.28, active_only=False)
    assert (low, high) == (pytest.approx(2 / 6), pytest.approx(2 / 6))


def test_k3_kl_and_weight_quantiles():
    # log w = ln 2 on one token, 0 on three: k3 per token = (2 − 1) − ln 2 = 0.306853, mean over 4 tokens
    log_w = np.array([math.log(2.0), 0.0, 0.0, 0.0])
    assert k3_kl(log_w) == pytest.approx((1 - math.log(2)) / 4)
    beh = np.full(4, -1.0)
    m = importance_metrics(beh + log_w, beh)
    # weights [2, 1, 1, 1]: ESS = 25 / 7, fraction 25/28
    assert m["is/ess"] == pytest.approx(25 / 7)
    assert m["is/ess_frac"] == pytest.approx(25 / 28)
    assert m["is/weight_max"] == pytest.approx(2.0)
    assert m["is/weight_min"] == pytest.approx(1.0)
    # sorted [1, 1, 1, 2]; p90 at index 0.9·3 = 2.7 → 1 + 0.7·(2 − 1) = 1.7
    assert m["is/weight_p90"] == pytest.approx(1.7)
    assert m["is/weight_p50"] == pytest.approx(1.0)


def test_quantiles_linear():
    # [1, 2, 3, 4]: p50 at index 1.5 → 2.5; p10 at 0.3 → 1.3
    q = quantiles(np.array([4.0, 1.0, 3.0, 2.0]), "x/", qs=(0.1, 0.5))
    assert q == {"x/p10": pytest.approx(1.3), "x/p50": pytest.approx(2.5), "x/max": 4.0}


def test_async_kl_behavior_is_the_k3_kl_of_the_staleness_weights():
    import torch

    from tracerl.telemetry.async_metrics import importance_weights

    # 3 masked tokens with π_prox/π_behavior = 2, 1, 1/2 and a masked-out token that must not count:
    # k3 = mean of (w - 1) - log w = [(1 - ln 2) + 0 + (-1/2 + ln 2)] / 3 = (1/2) / 3 = 1/6
    prox = torch.log(torch.tensor([[0.4, 0.3, 0.1, 0.9]]))
    beh = torch.log(torch.tensor([[0.2, 0.3, 0.2, 0.1]]))
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    out = importance_weights(prox, beh, mask)
    assert out["async/kl_behavior"] == pytest.approx(1 / 6, rel=1e-6)
    assert out["async/iw_tokens"] == 3
    same = importance_weights(prox, prox, mask)  # no staleness: KL 0, every weight 1, ESS fraction 1
    assert same["async/kl_behavior"] == 0.0 and same["async/ess_frac"] == pytest.approx(1.0)
