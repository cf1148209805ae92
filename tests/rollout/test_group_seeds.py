"""`rollout.seeding: group` (rollout/group_seeds.py): a group's tokens do not depend on which call plays it.

The same 4 groups played in one call, in two calls of 2 groups, or in reverse group order give the same tokens and
reset seeds group by group, and the same behavior log-probs up to float rounding (a row's logits come from a
batched forward whose other rows differ: measured |diff| <= 5e-7 here), with the torch engine's fast (KV
session) and plain paths; each group's uniforms are those of its own generator drawn alone."""

import torch

from tracerl.envs import get_env
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.rollout.group_seeds import GroupSeeds, RowGenerators

SPEC = get_env("math_tool")


def _play(model, tok, tasks, gids, fast=True):
    kw = dict(budgets=LoopBudgets(max_turns=2, max_tokens=160, max_new_tokens=12), sampling={"temperature": 1.0},
              policy_version=0, tokenizer_hashes={})
    return run_episodes(TorchEngine(model, tok, fast=fast), SPEC, tasks, gids, seed=11, generator=GroupSeeds(11), **kw)


def _by_group(trajs):
    out = {}
    for t in trajs:
        out.setdefault(t.group_id, []).append((t.token_ids, [x for x in t.behavior_logprobs if x == x], t.reset_seed))
    return out


def _same(a, b):
    """Same groups, rows, tokens and reset seeds; log-probs within 1e-5."""
    assert a.keys() == b.keys()
    for g in a:
        assert [(r[0], r[2]) for r in a[g]] == [(r[0], r[2]) for r in b[g]]
        for ra, rb in zip(a[g], b[g]):
            assert torch.allclose(torch.tensor(ra[1]), torch.tensor(rb[1]), atol=1e-5, rtol=0)


def test_a_group_samples_the_same_tokens_whatever_the_split(tiny):
    model, tok = tiny
    tasks = SPEC.generate("train", 4, 3)
    batch = [t for t in tasks for _ in range(3)]
    gids = [f"s0-p{i // 3}" for i in range(len(batch))]
    whole = _by_group(_play(model, tok, batch, gids))
    halves = _by_group(_play(model, tok, batch[:6], gids[:6]) + _play(model, tok, batch[6:], gids[6:]))
    order = [i for g in (3, 2, 1, 0) for i in range(3 * g, 3 * g + 3)]  # the groups in reverse order
    backwards = _by_group(_play(model, tok, [batch[i] for i in order], [gids[i] for i in order]))
    plain = _by_group(_play(model, tok, batch[3:9], gids[3:9], fast=False))
    _same(whole, halves)
    _same(whole, backwards)
    _same({g: whole[g] for g in plain}, plain)
    assert len({r[2] for v in whole.values() for r in v}) == 12  # every episode its own reset seed
    assert len({tuple(r[0]) for v in whole.values() for r in v}) > 1  # sampling, not one fixed sequence


def test_row_generators_draw_each_group_alone():
    """Rows 0, 2 belong to group a (budgets 3, 5), row 1 to group b (budget 2): a draws (2, 5) and b (1, 2) from
    their own generators; the columns past a group's longest budget stay 0."""
    ga, gb = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    u = RowGenerators([ga, gb, ga]).uniforms([3, 2, 5], 5)
    a = torch.rand((2, 5), generator=torch.Generator().manual_seed(1))
    b = torch.rand((1, 2), generator=torch.Generator().manual_seed(2))
    assert torch.equal(u[[0, 2]], a) and torch.equal(u[1, :2], b[0]) and torch.equal(u[1, 2:], torch.zeros(3))
    seeds = RowGenerators([ga, gb, ga]).seeds()
    assert seeds[0] != seeds[2]  # a's two rows, two draws
