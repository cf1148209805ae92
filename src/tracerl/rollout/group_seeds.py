"""Sampling seeded per group, so a group's tokens do not depend on which worker plays it (`rollout.seeding: group`).

With `rollout.seeding: step` (the default with one rollout worker) a call's rows draw their uniforms from one
generator, in the order of the call's rows: a group's tokens then depend on every other row of the step, and
a step split across N workers would sample other tokens. With `group`, each group id owns a generator seeded
from (the call's seed, the group id), and each batched turn draws every group's uniforms from its own
generator, in row order within the group (`RowGenerators`). A group's rows always play in one call, so its
tokens are the same whether its call holds the whole step (one worker) or a share (N workers, any split).
Env reset seeds are keyed the same way, (seed, group id, index in the group), instead of the row's index
in the call.

Randomness only: a row's logits come from a batched forward whose other rows differ with the split; the
engines' per-row results do not depend on them up to float rounding (tests/rollout/test_rollout_workers.py
measures tokens and log-probs equal).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import torch


def _seed_of(*parts) -> int:
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "little") >> 1


class GroupSeeds:
    """One `torch.Generator` per group id, seeded from (`seed`, group id); passed to `run_episodes` as its
    `generator`, it makes the episodes' sampling and reset seeds independent of how groups are split."""

    def __init__(self, seed: int):
        self.seed = int(seed)
        self._gens: dict[str, torch.Generator] = {}

    def of(self, group_id: str) -> torch.Generator:
        if group_id not in self._gens:
            self._gens[group_id] = torch.Generator().manual_seed(_seed_of(self.seed, "group", group_id))
        return self._gens[group_id]

    def for_rows(self, group_ids: Sequence[str]) -> RowGenerators:
        return RowGenerators([self.of(g) for g in group_ids])

    def reset_seeds(self, seed: int, group_ids: Sequence[str]) -> list[int]:
        """Each episode's env reset seed from (`seed`, its group id, its index among the group's rows)."""
        seen: dict[str, int] = {}
        out = []
        for g in group_ids:
            j = seen.get(g, 0)
            seen[g] = j + 1
            out.append(_seed_of(seed, "reset", g, j) % 2**31)
        return out


class RowGenerators:
    """The generator of each row of one engine call (rows of a group share one); what `draw_uniforms` and
    `row_seeds` take in place of a `torch.Generator`."""

    def __init__(self, gens: Sequence[torch.Generator]):
        self.gens = list(gens)

    def groups(self) -> list[tuple[torch.Generator, list[int]]]:
        """(generator, its row indices), in order of first appearance."""
        out: dict[int, tuple[torch.Generator, list[int]]] = {}
        for i, g in enumerate(self.gens):
            out.setdefault(id(g), (g, []))[1].append(i)
        return list(out.values())

    def select(self, rows: Sequence[int]) -> RowGenerators:
        return RowGenerators([self.gens[i] for i in rows])

    def uniforms(self, budgets: Sequence[int], width: int) -> torch.Tensor:
        """(rows, width): each group draws (its rows, its longest budget) from its generator; the columns past
        a group's longest budget are never read (a row stops at its budget) and stay 0."""
        out = torch.zeros((len(self.gens), max(width, 1)))
        for g, rows in self.groups():
            w = max(1, max(budgets[i] for i in rows))
            out[rows, :w] = torch.rand((len(rows), w), generator=g)
        return out

    def seeds(self) -> list[int]:
        """One sampling seed per row (engines that seed each row: vLLM, remote), drawn group by group."""
        out = [0] * len(self.gens)
        for g, rows in self.groups():
            for i, s in zip(rows, torch.randint(0, 2**31 - 1, (len(rows),), generator=g).tolist()):
                out[i] = int(s)
        return out

    def by_group(self, call: Callable[[list[int], torch.Generator], list]) -> list:
        """`call(rows, generator)` once per group (engines that draw one seed per call: HF generate), results
        put back in row order."""
        out: list = [None] * len(self.gens)
        for g, rows in self.groups():
            for i, r in zip(rows, call(rows, g)):
                out[i] = r
        return out
