"""Level-0 invariants as hypothesis properties across every masked loss.

Masked-out positions (prompt, observation, template, padding) get exactly zero gradient even when
their stored log-probabilities are NaN; importance corrections are exactly one when policies match.
"""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerl.algorithms.losses import (
    clip_cov, decoupled_ppo, kl_cov, kl_loss, mis, mopd_loss, policy_loss, positive_nll, tis, value_loss,
)

D = torch.float64

batch = st.tuples(st.integers(1, 3), st.integers(1, 6), st.integers(0, 2**31 - 1), st.sampled_from(["token", "sequence", "fixed"]))


def _make(B, T, seed):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(B, T, generator=g) < 0.6
    old = torch.randn(B, T, dtype=D, generator=g) - 1
    lp = old + 0.3 * torch.randn(B, T, dtype=D, generator=g)
    adv = torch.randn(B, T, dtype=D, generator=g)
    nan_old = torch.where(mask, old, torch.full_like(old, float("nan")))
    return g, mask, old, nan_old, lp, adv


LOSSES = {
    "policy_loss": lambda x, o, a, m, agg: policy_loss(x, o, a, m, clip_low=0.2, clip_high=0.28, aggregation=agg, max_len=8, dual_clip=3.0),
    "decoupled_ppo": lambda x, o, a, m, agg: decoupled_ppo(x, o, o - 0.1, a, m, clip_low=0.2, clip_high=0.28, aggregation=agg, max_len=8),
    "kl_loss": lambda x, o, a, m, agg: kl_loss(x, o, m, estimator="k3", aggregation=agg, max_len=8),
    "value_loss": lambda x, o, a, m, agg: value_loss(x, o, a, m, aggregation=agg, max_len=8),
    "positive_nll": lambda x, o, a, m, agg: positive_nll(x, m, torch.ones(x.shape[0])),
    "clip_cov": lambda x, o, a, m, agg: clip_cov(x, o, a, m, clip_ratio=0.3, cov_low=-10, cov_high=10, aggregation=agg, max_len=8,
                                                 generator=torch.Generator().manual_seed(0)),
    "kl_cov": lambda x, o, a, m, agg: kl_cov(x, o, a, m, k=0.3, aggregation=agg, max_len=8),
    "mopd_loss": lambda x, o, a, m, agg: mopd_loss(x, o, a, m, aggregation=agg, max_len=8),
}


@settings(max_examples=30, deadline=None)
@given(batch)
def test_masked_positions_get_exactly_zero_gradient(b):
    B, T, seed, agg = b
    _, mask, _, nan_old, lp, adv = _make(B, T, seed)
    nan_adv = torch.where(mask, adv, torch.full_like(adv, float("nan")))
    for name, fn in LOSSES.items():
        x = lp.clone().requires_grad_()
        loss, stats = fn(x, nan_old, nan_adv, mask, agg)
        loss.backward()
        assert torch.isfinite(loss), name
        assert torch.isfinite(x.grad).all(), name
        assert (x.grad[~mask] == 0).all(), name
        assert all(torch.isfinite(v).all() or v.isnan().all() for v in stats.values()), name


@settings(max_examples=30, deadline=None)
@given(batch)
def test_corrections_are_exactly_one_when_policies_match(b):
    B, T, seed, _ = b
    _, mask, old, _, _, _ = _make(B, T, seed)
    w, _ = tis(old, old.clone(), mask)
    assert (w[mask] == 1).all() and (w[~mask] == 0).all()
    w, keep, stats = mis(old, old.clone(), mask)
    assert (w[mask] == 1).all() and keep.bool().eq(mask).all() and stats["mis_dropped_frac"].item() == 0.0


@settings(max_examples=30, deadline=None)
@given(batch)
def test_scaling_the_mask_region_out_of_the_batch_changes_nothing(b):
    # appending a fully-masked row (a padded response with no action token) must not change token or
    # sequence aggregation; `fixed` divides by B·L_max, so it must change by exactly B/(B+1)
    B, T, seed, agg = b
    _, mask, old, _, lp, adv = _make(B, T, seed)
    base, _ = policy_loss(lp, old, adv, mask, clip_low=0.2, clip_high=0.28, aggregation=agg, max_len=8)
    pad = lambda x, v: torch.cat([x, torch.full((1, T), v, dtype=x.dtype)])  # noqa: E731
    more, _ = policy_loss(pad(lp, -1.0), pad(old, float("nan")), pad(adv, 5.0), pad(mask, False),
                          clip_low=0.2, clip_high=0.28, aggregation=agg, max_len=8)
    expected = base.item() * (B / (B + 1) if agg == "fixed" else 1.0)
    assert abs(more.item() - expected) < 1e-12
