"""The Level-2 design: a 2^(5-1) fractional factorial (resolution V, generator E = ABCD) over the five
factors of the reference document, each at two levels coded -1 / +1. The half with defining relation
I = -ABCDE (E = -ABCD) is used, so the all -1 run, the shipped default recipe, is one of the cells."""

from __future__ import annotations

import itertools

# factor -> (override at -1, override at +1); -1 is the shipped default recipe's choice
FACTORS: dict[str, tuple[list[str], list[str]]] = {
    "aggregation": (["rl.algorithm.aggregation=token"], ["rl.algorithm.aggregation=sequence"]),
    "std_scaling": (["rl.algorithm.scale=std"], ["rl.algorithm.scale=none"]),
    "clipping": (["rl.algorithm.clip_high=0.28"], ["rl.algorithm.clip_high=0.2"]),   # asymmetric vs symmetric
    "truncation": (["rl.truncation=mask"], ["rl.truncation=penalize"]),
    "sampling": (["tasks.sampler.kind=uniform"], ["tasks.sampler.kind=dynamic"]),  # static vs non-zero-variance
}
LABELS = {"aggregation": ("token", "seq"), "std_scaling": ("std", "nostd"), "clipping": ("asym", "sym"),
          "truncation": ("mask", "penal"), "sampling": ("static", "nzv")}


def half_fraction(k: int = 5) -> list[tuple[int, ...]]:
    """The 2^(k-1) runs: a full factorial in the first k-1 factors, the last factor minus their product."""
    rows = []
    for base in itertools.product((-1, 1), repeat=k - 1):
        last = -1
        for x in base:
            last *= x
        rows.append((*base, last))
    return rows


def cells() -> list[tuple[str, tuple[int, ...], list[str]]]:
    """(name, coded levels, overrides) per design point, in standard order."""
    out = []
    for row in half_fraction(len(FACTORS)):
        name = "-".join(LABELS[f][(x + 1) // 2] for f, x in zip(FACTORS, row))
        overrides = [o for f, x in zip(FACTORS, row) for o in FACTORS[f][(x + 1) // 2]]
        out.append((name, row, overrides))
    return out


def main_effects(rows: list[tuple[int, ...]], y: list[float]) -> dict[str, float]:
    """Per factor: mean response at +1 minus mean at -1 (the design is balanced, so each mean has half the runs)."""
    out = {}
    for j, f in enumerate(FACTORS):
        hi = [v for r, v in zip(rows, y) if r[j] == 1]
        lo = [v for r, v in zip(rows, y) if r[j] == -1]
        out[f] = sum(hi) / len(hi) - sum(lo) / len(lo)
    return out
