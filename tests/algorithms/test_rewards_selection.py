"""Reward shaping (overlong penalty, length bonus, checkpoint weights) and selection rules."""

import pytest
import torch

from tracerl.algorithms.rewards import checkpoint_reward, length_bonus, overlong_penalty
from tracerl.algorithms.selection import dynamic_sampling, resample_on_correct, roc_penalty


def test_dapo_overlong_penalty_with_the_disclosed_run_lengths():
    # L_max = 20,480, L_cache = 4,096 → soft zone starts at 16,384
    # 16,384 → 0; 18,432 → (16,384 − 18,432)/4,096 = −0.5; 20,480 → −1; 20,481 → −1 (hard); 100 → 0
    out = overlong_penalty(torch.tensor([100, 16384, 18432, 20480, 20481]), max_len=20480, cache_len=4096)
    assert out.tolist() == [0.0, 0.0, -0.5, -1.0, -1.0]
    with pytest.raises(ValueError, match="cache_len"):
        overlong_penalty(torch.tensor([1]), max_len=10, cache_len=20)


def test_checkpoint_weights_sum_to_one():
    # reference 002 §5.2: discovery 0.25 + valid patch 0.25 + full suite 0.50 = 1.00
    w = [0.25, 0.25, 0.50]
    achieved = torch.tensor([[1, 1, 1],    # everything → 1.00
                             [1, 1, 0],    # found the failure and patched, suite fails → 0.50
                             [0, 0, 1],    # shortcut that only triggers the suite check → 0.50 (the tie the text warns of)
                             [3, 0, 0]])   # rediscovering the failure three times still counts once → 0.25
    assert checkpoint_reward(achieved, w).tolist() == [1.0, 0.5, 0.5, 0.25]
    with pytest.raises(ValueError, match="weights"):
        checkpoint_reward(achieved, [0.5, 0.5])
    with pytest.raises(ValueError, match="non-negative"):
        checkpoint_reward(achieved, [0.5, -0.5, 1.0])


def test_group_relative_length_bonus_by_hand():
    # think lengths [100, 200, 300]: mean 200, spread 200 → w̃ = [0.5, 0, −0.5]; answers all 10 → 0
    # λ_think = 0.5 → [+0.25, 0, −0.25]; quality [1, 1, 0], 80th percentile = 1 → eligible {0, 1};
    # shortest eligible is 0 → +0.5.  R = [1, 1, 0] + ... = [1.75, 1.0, −0.25]
    out, stats = length_bonus(torch.tensor([1.0, 1.0, 0.0]), torch.tensor([100, 200, 300]), torch.tensor([10, 10, 10]),
                              ["q", "q", "q"], quality_B=torch.tensor([1.0, 1.0, 0.0]))
    torch.testing.assert_close(out, torch.tensor([1.75, 1.0, -0.25]))
    assert stats["top_bonus_count"].item() == 1.0
    # without quality the centred bonuses sum to zero inside each group
    out, _ = length_bonus(torch.zeros(5), torch.tensor([1, 5, 9, 3, 3]), torch.tensor([4, 2, 0, 7, 1]), [0, 0, 0, 1, 1])
    assert out[:3].sum().item() == pytest.approx(0.0, abs=1e-6) and out[3:].sum().item() == pytest.approx(0.0, abs=1e-6)


def test_dynamic_sampling_reports_what_it_dropped():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.5, 0.5])
    keep, report = dynamic_sampling(rewards, ["a", "a", "b", "b", "c", "c", "d", "d"])
    assert keep.tolist() == [False, False, True, True, False, False, False, False]
    assert report["groups"] == 4 and report["kept_groups"] == 1 and report["dropped_groups"] == 3
    assert report["dropped"] == [{"group_id": "a", "reward": 1.0, "size": 2}, {"group_id": "c", "reward": 0.0, "size": 2},
                                 {"group_id": "d", "reward": 0.5, "size": 2}]


def test_roc_penalty_by_hand():
    # no tool call → 0.5; one answer in 3 turns → min(1, 0/3) = 0         → 0.5
    # 1 error in 4 calls → 0.25; 3 answers in 4 turns → min(1, 2/4) = 0.5 → 0.75
    # 2 errors in 2 calls → 1; no answer tag → 1                          → 2.0
    p = roc_penalty(torch.tensor([0, 4, 2]), torch.tensor([0, 1, 2]), torch.tensor([1, 3, 0]), torch.tensor([3, 4, 5]))
    assert p.tolist() == [0.5, 0.75, 2.0]


def test_resample_on_correct_keeps_negatives_up_to_half():
    # 2G = 8 candidates, G = 4: 5 negatives, 3 positives → 2 negatives + 2 positives
    correct = torch.tensor([0, 1, 0, 1, 0, 0, 1, 0]).bool()
    kept, report = resample_on_correct(correct, torch.zeros(8), [0] * 8, group_size=4, generator=torch.Generator().manual_seed(0))
    assert kept.numel() == 4 and int(correct[kept].sum()) == 2
    # 1 negative, 7 positives → 1 negative + 3 positives; 8 negatives → 4 negatives
    kept, _ = resample_on_correct(torch.tensor([0] + [1] * 7).bool(), torch.zeros(8), [0] * 8, group_size=4)
    assert int((~torch.tensor([0] + [1] * 7).bool())[kept].sum()) == 1 and kept.numel() == 4
    kept, report = resample_on_correct(torch.zeros(8).bool(), torch.zeros(8), [0] * 8, group_size=4)
    assert kept.numel() == 4 and report["kept_positive_frac"] == 0.0
    with pytest.raises(ValueError, match="fewer than group_size"):
        resample_on_correct(torch.ones(3).bool(), torch.zeros(3), [0] * 3, group_size=4)


def test_resample_on_correct_prefers_clean_positives():
    # 4 negatives, 4 positives with penalties [0, 0, 0, 2]; G = 4 keeps 2 positives.
    # weights 1/(p + 0.1) = [10, 10, 10, 0.476]: the messy one is picked in ≈ 2·0.476/30.5 ≈ 3% of draws
    correct = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]).bool()
    penalties = torch.tensor([0.0, 0, 0, 0, 0, 0, 0, 2.0])
    g = torch.Generator().manual_seed(0)
    messy = sum(7 in resample_on_correct(correct, penalties, [0] * 8, group_size=4, generator=g)[0].tolist()
                for _ in range(300))
    assert messy < 30  # uniform choice would pick it in half of the draws (~150)


def test_resample_on_correct_per_group():
    correct = torch.tensor([1, 0, 1, 0, 1, 1, 0, 0]).bool()
    kept, report = resample_on_correct(correct, torch.zeros(8), ["x", "x", "x", "x", "y", "y", "y", "y"], group_size=2)
    assert kept.numel() == 4 and report["dropped"] == 4
    assert sum(i < 4 for i in kept.tolist()) == 2
