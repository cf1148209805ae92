"""Unbiased pass@k from n samples of which c are correct.

Source: Chen et al. 2021, "Evaluating Large Language Models Trained on Code" (Codex), eq. 1:

    pass@k = 1 − C(n − c, k) / C(n, k) = 1 − Π_{i = n−c+1}^{n} (1 − k/i)

The product form avoids huge binomials. It estimates the probability that at least one of k samples
drawn without replacement from the n is correct.
"""

from __future__ import annotations

import operator

from tracerl.algorithms.registry import register


@register("pass_at_k", kind="metric", description="unbiased pass@k estimator 1 - C(n-c,k)/C(n,k)",
          source="Chen et al. 2021 (Codex), eq. 1")
def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k of the n samples is correct, given c correct."""
    try:  # any integer-like (int, numpy or 0-d torch integer); floats such as 2.5 are refused
        n, c, k = operator.index(n), operator.index(c), operator.index(k)
    except TypeError:
        raise TypeError(f"pass_at_k takes integers, got n={n!r}, c={c!r}, k={k!r}") from None
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs n >= 1, 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod
