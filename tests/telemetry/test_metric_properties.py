"""Invariants of the calculators (hypothesis), beside the hand-computed cases."""

from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerl.algorithms.passk import pass_at_k
from tracerl.eval.aggregate import Sample, pass_at
from tracerl.telemetry.exploration import entropy_metrics
from tracerl.telemetry.importance import ess

weights = st.lists(st.floats(min_value=1e-3, max_value=1e3), min_size=1, max_size=50)


@settings(max_examples=60, deadline=None)
@given(weights, st.floats(min_value=1e-2, max_value=1e2))
def test_ess_between_one_and_n_and_scale_free(w, scale):
    e = ess(w)
    assert 1.0 - 1e-9 <= e <= len(w) + 1e-9
    assert ess(np.asarray(w) * scale) == pytest.approx(e, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 20).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_is_the_closed_form_and_grows_with_k(nck):
    n, c, k = nck
    tasks = {"t": [Sample(correct=i < c) for i in range(n)]}
    assert pass_at(tasks, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))
    if k < n:
        assert pass_at_k(n, c, k + 1) >= pass_at_k(n, c, k) - 1e-12


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5), st.sampled_from(["reasoning", "tool_call", "answer"])), min_size=1, max_size=40))
def test_entropy_is_the_share_weighted_mean_of_its_strata(tokens):
    ent = [np.asarray([h for h, _ in tokens])]
    labels = [[lab for _, lab in tokens]]
    m = entropy_metrics(ent, labels=labels)
    recombined = sum(m[f"policy/token_frac_{k}"] * m.get(f"policy/entropy_{k}", 0.0)
                     for k in ("reasoning", "tool_call", "answer"))
    assert recombined == pytest.approx(m["policy/entropy"], abs=1e-9)
