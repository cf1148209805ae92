"""GiGPO: hand-worked anchor groups, GRPO lower bound, and vectorised grouping ≡ plain-Python reference."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerl.algorithms.advantages import gigpo, grpo

D = torch.float64


def test_hand_worked_anchor_state():
    # two episodes of one task, γ = 1, scale none (centred). Episode returns: e0 = 1, e1 = 0 → A^E = [+0.5, -0.5]
    # states: e0 visits s0, s1, s2 ; e1 visits s0, s1, s3.  Returns-to-go: e0 [1,1,1], e1 [0,0,0]
    # anchor s0: {1, 0} → ±0.5 ; anchor s1: ±0.5 ; s2 and s3 are singletons → 0
    # A = A^E + ω·A^S with ω = 1: e0 [1.0, 1.0, 0.5], e1 [-1.0, -1.0, -0.5]
    r = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]], dtype=D)
    adv, stats = gigpo(r, torch.ones(2, 3), [["s0", "s1", "s2"], ["s0", "s1", "s3"]], ["task", "task"],
                       omega=1.0, gamma=1.0, scale="none")
    torch.testing.assert_close(adv, torch.tensor([[1.0, 1.0, 0.5], [-1.0, -1.0, -0.5]], dtype=D))
    assert stats["anchor_groups"].item() == 4.0


def test_discounted_step_returns_compare_within_an_anchor():
    # γ = 0.5, one task, episodes: e0 rewards [0, 0, 4] states [a, b, c]; e1 rewards [0, 2] states [a, b]
    # returns-to-go: e0 [1, 2, 4], e1 [1, 2] → episode returns 1 and 1 → A^E = 0
    # anchor a: {1, 1} → 0 ; anchor b: {2, 2} → 0 ; c singleton → 0.  Everything 0, although rewards differ:
    # equal discounted returns from the same state means no action was better.
    r = torch.tensor([[0.0, 0.0, 4.0], [0.0, 2.0, 0.0]], dtype=D)
    m = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv, _ = gigpo(r, m, [["a", "b", "c"], ["a", "b", "pad"]], [0, 0], gamma=0.5, scale="none")
    assert adv.abs().max().item() == 0.0
    # now e1 reaches b and gets 3 instead: returns-to-go e1 [1.5, 3]; A^E = [-0.25, 0.25];
    # anchor a: {1, 1.5} → [-0.25, 0.25]; anchor b: {2, 3} → [-0.5, 0.5]
    r[1, 1] = 3.0
    adv, _ = gigpo(r, m, [["a", "b", "c"], ["a", "b", "pad"]], [0, 0], gamma=0.5, scale="none", omega=2.0)
    # e0: [-0.25 + 2·(-0.25), -0.25 + 2·(-0.5), -0.25 + 0] = [-0.75, -1.25, -0.25]; e1: [0.75, 1.25, 0 (masked)]
    torch.testing.assert_close(adv, torch.tensor([[-0.75, -1.25, -0.25], [0.75, 1.25, 0.0]], dtype=D))


def test_same_state_in_different_tasks_is_not_one_anchor():
    # the same state id under two different groups must not be compared
    r = torch.tensor([[1.0], [0.0]], dtype=D)
    adv, stats = gigpo(r, torch.ones(2, 1), [["s"], ["s"]], ["t1", "t2"], gamma=1.0, scale="none")
    assert adv.tolist() == [[0.0], [0.0]]
    assert stats["anchor_groups"].item() == 2.0


def test_no_repeated_state_reduces_to_grpo():
    # GiGPO's lower bound: all anchors singletons → A = A^E = GRPO of episode returns (γ = 1: reward sums)
    r = torch.tensor([[0.0, 1.0], [0.0, 0.0], [1.0, 1.0]], dtype=D)
    states = [[f"e{b}s{t}" for t in range(2)] for b in range(3)]
    adv, _ = gigpo(r, torch.ones(3, 2), states, [0, 0, 0], gamma=1.0)
    expected = grpo(r.sum(dim=1), [0, 0, 0])
    torch.testing.assert_close(adv, expected[:, None].expand(3, 2))


def plain_gigpo(rewards, masks, states, groups, omega, gamma, scale, eps=1e-6):
    """Reference: dictionaries of lists, one element at a time."""
    def relative(x, pool):
        mean = sum(pool) / len(pool)
        if all(p == pool[0] for p in pool):
            return 0.0
        if scale == "none":
            return x - mean
        std = math.sqrt(sum((p - mean) ** 2 for p in pool) / len(pool))
        return (x - mean) / (std + eps)

    returns = []
    for rew, m in zip(rewards, masks):
        g, out = 0.0, [None] * len(rew)
        for t in reversed(range(len(rew))):
            if m[t]:
                g = rew[t] + gamma * g
                out[t] = g
        returns.append(out)
    episode = {}
    anchors = {}
    for b, (ret, m) in enumerate(zip(returns, masks)):
        first = next(t for t in range(len(m)) if m[t])
        episode.setdefault(groups[b], []).append(ret[first])
        for t in range(len(m)):
            if m[t]:
                anchors.setdefault((groups[b], states[b][t]), []).append(ret[t])
    adv = []
    for b, (ret, m) in enumerate(zip(returns, masks)):
        first = next(t for t in range(len(m)) if m[t])
        a_e = relative(ret[first], episode[groups[b]])
        adv.append([a_e + omega * relative(ret[t], anchors[(groups[b], states[b][t])]) if m[t] else 0.0
                    for t in range(len(m))])
    return adv


episodes = st.lists(
    st.tuples(st.lists(st.tuples(st.sampled_from([0.0, 0.0, 1.0, -0.5, 2.0]), st.integers(0, 3)), min_size=1, max_size=5),
              st.integers(0, 1)),
    min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(episodes, st.sampled_from([0.5, 1.0]), st.sampled_from([0.9, 1.0]), st.sampled_from(["std", "none"]),
       st.booleans())
def test_vectorised_grouping_equals_plain_python(eps_, omega, gamma, scale, tensor_ids):
    S = max(len(steps) for steps, _ in eps_)
    rewards = [[r for r, _ in steps] + [0.0] * (S - len(steps)) for steps, _ in eps_]
    masks = [[True] * len(steps) + [False] * (S - len(steps)) for steps, _ in eps_]
    states = [[s for _, s in steps] + [-1] * (S - len(steps)) for steps, _ in eps_]
    groups = [g for _, g in eps_]
    ids = torch.tensor(states) if tensor_ids else [[f"state-{s}" for s in row] for row in states]
    adv, _ = gigpo(torch.tensor(rewards, dtype=D), torch.tensor(masks), ids, torch.tensor(groups),
                   omega=omega, gamma=gamma, scale=scale)
    expected = plain_gigpo(rewards, masks, states, groups, omega, gamma, scale)
    for b in range(len(eps_)):
        assert adv[b].tolist() == pytest.approx(expected[b], abs=1e-7)
