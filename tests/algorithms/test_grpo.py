"""GRPO / Dr.GRPO / RLOO advantages: hand-worked numbers and group invariants."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerl.algorithms.advantages import dr_grpo, grpo, grpo_with_stats, rloo


def test_binary_rewards_worked_example():
    # rewards [1,0,1,0]: mean 0.5; population std sqrt((.25+.25+.25+.25)/4) = 0.5
    # (1-0.5)/0.5 = 1, (0-0.5)/0.5 = -1  → [1,-1,1,-1]  (eps=1e-6 moves this by 2e-6 only)
    adv = grpo(torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.tensor([7, 7, 7, 7]))
    torch.testing.assert_close(adv, torch.tensor([1.0, -1.0, 1.0, -1.0]), atol=1e-5, rtol=0)


def test_population_not_sample_std():
    # one positive in four: mean 0.25, centred [0.75,-0.25,-0.25,-0.25]
    # population var = (0.5625 + 3*0.0625)/4 = 0.1875, std = 0.4330127; 0.75/0.4330127 = 1.7320508 = sqrt(3)
    # (the unbiased std 0.5 would give 1.5)
    adv = grpo(torch.tensor([1.0, 0.0, 0.0, 0.0]), [0, 0, 0, 0], eps=0.0)
    torch.testing.assert_close(adv, torch.tensor([math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3)]))


def test_groups_are_independent_and_hashable_ids_accepted():
    # group "a": [2, 4] → mean 3, std 1 → [-1, 1]; group "b": [10, 10, 13] → mean 11, centred [-1,-1,2],
    # var (1+1+4)/3 = 2, std sqrt(2) → [-0.7071, -0.7071, 1.4142]
    adv = grpo(torch.tensor([2.0, 10.0, 4.0, 10.0, 13.0]), ["a", "b", "a", "b", "b"], eps=0.0)
    s = math.sqrt(2)
    torch.testing.assert_close(adv, torch.tensor([-1.0, -1 / s, 1.0, -1 / s, 2 / s]))


def test_dr_grpo_only_centres():
    # scale="none": [1,0,0,0] - 0.25 = [0.75,-0.25,-0.25,-0.25]
    expected = torch.tensor([0.75, -0.25, -0.25, -0.25])
    torch.testing.assert_close(grpo(torch.tensor([1.0, 0, 0, 0]), [1, 1, 1, 1], scale="none"), expected)
    torch.testing.assert_close(dr_grpo(torch.tensor([1.0, 0, 0, 0]), [1, 1, 1, 1]), expected)


def test_all_equal_group_gives_exactly_zero():
    # Level-0: [0.1]*3 has mean 0.10000000000000002 in float64; without the all-equal rule the
    # residue -1.4e-17 divided by (0 + 1e-6) would leak through. Here it is exactly 0.
    adv, stats = grpo_with_stats(torch.tensor([0.1, 0.1, 0.1, 1.0, 0.0], dtype=torch.float64), [0, 0, 0, 1, 1])
    assert adv[:3].tolist() == [0.0, 0.0, 0.0]
    assert stats["zero_signal_groups"].item() == 1.0
    assert stats["groups"].item() == 2.0


def test_rloo_worked_example():
    # rewards [1,0,0,1]: baseline of member 0 = (0+0+1)/3 = 1/3 → 2/3; member 1 = (1+0+1)/3 = 2/3 → -2/3
    adv = rloo(torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.tensor([0, 0, 0, 0]))
    torch.testing.assert_close(adv, torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3]))


def test_rloo_singleton_group_is_zero_not_nan():
    adv = rloo(torch.tensor([1.0, 0.5, 0.0]), [0, 1, 1])
    assert adv.tolist() == [0.0, 0.5, -0.5]


def test_mismatched_lengths_raise():
    with pytest.raises(ValueError, match="group ids"):
        grpo(torch.tensor([1.0, 0.0]), [0, 0, 0])


rewards_groups = st.lists(
    st.lists(st.floats(-10, 10, allow_nan=False, width=32), min_size=1, max_size=6), min_size=1, max_size=5
)


def _flatten(groups):
    rewards = [r for g in groups for r in g]
    ids = [i for i, g in enumerate(groups) for _ in g]
    return torch.tensor(rewards, dtype=torch.float64), ids


@settings(max_examples=60, deadline=None)
@given(rewards_groups)
def test_group_advantages_sum_to_zero(groups):
    rewards, ids = _flatten(groups)
    for adv in (grpo(rewards, ids), grpo(rewards, ids, scale="none"), rloo(rewards, ids)):
        for g in set(ids):
            sel = torch.tensor([i == g for i in ids])
            assert abs(adv[sel].sum().item()) < 1e-6 * max(1.0, rewards.abs().max().item())


@settings(max_examples=60, deadline=None)
@given(rewards_groups)
def test_rloo_is_scaled_centring(groups):
    # A_rloo = n/(n-1) · (R - mean) for n > 1
    rewards, ids = _flatten(groups)
    centred = grpo(rewards, ids, scale="none")
    adv = rloo(rewards, ids)
    for i, g in enumerate(ids):
        n = ids.count(g)
        expected = centred[i].item() * n / (n - 1) if n > 1 else 0.0
        assert adv[i].item() == pytest.approx(expected, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(rewards_groups, st.integers(0, 4))
def test_duplicating_a_response_changes_only_its_group(groups, which):
    # Level-0: appending a copy of one response changes advantages only inside that response's group
    rewards, ids = _flatten(groups)
    g = which % len(groups)
    dup_rewards = torch.cat([rewards, torch.tensor([groups[g][0]], dtype=torch.float64)])
    dup_ids = ids + [g]
    before, after = grpo(rewards, ids), grpo(dup_rewards, dup_ids)
    for i, gid in enumerate(ids):
        if gid != g:
            assert after[i].item() == before[i].item()
    # ...and the copy gets the same advantage as the original it duplicates
    first = ids.index(g)
    assert after[-1].item() == pytest.approx(after[first].item(), abs=1e-9)
