"""PRIME, REINFORCE++(-baseline) and the MOPD advantage: hand-worked numbers and invariants."""

import math

import pytest
import torch

from tracerl.algorithms.advantages import mopd, prime, reinforce_pp, reinforce_pp_baseline

D = torch.float64


def test_prime_hand_worked():
    # β = 0.5, γ = 1, one group of two rollouts, outcomes R = [1, 0]
    # log πφ − log πref: rollout 0 [0.4, 0.2] → r_φ [0.2, 0.1], mean 0.15
    #                    rollout 1 [-0.2, 0, obs, -0.4] (obs masked) → r_φ [-0.1, 0, -0.2], mean -0.1
    # process baselines (leave-one-out): rollout 0 uses -0.1, rollout 1 uses 0.15
    # rollout 0: centred [0.3, 0.2] → suffix sums [0.5, 0.2]; outcome 1 − 0 = 1 → [1.5, 1.2]
    # rollout 1: centred [-0.25, -0.15, -0.35] → suffix sums [-0.75, -0.5, -0.35]; outcome 0 − 1 = −1
    #            → [-1.75, -1.5, (obs) 0, -1.35]
    prm = torch.tensor([[0.4, 0.2, 0.0, 0.0], [-0.2, 0.0, 5.0, -0.4]], dtype=D)
    ref = torch.zeros(2, 4, dtype=D)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 1]])
    adv, stats = prime(prm, ref, torch.tensor([1.0, 0.0]), [0, 0], mask, beta=0.5)
    torch.testing.assert_close(adv, torch.tensor([[1.5, 1.2, 0.0, 0.0], [-1.75, -1.5, 0.0, -1.35]], dtype=D))
    assert stats["outcome_adv_abs_mean"].item() == pytest.approx(1.0)


def test_prime_discount():
    # single rollout... in a group of 2 with identical implicit rewards: process baseline = own mean.
    # r_φ = [1, 0] for both (β=1), means 0.5 → centred [0.5, -0.5]; γ = 0.5: A1 = -0.5, A0 = 0.5 + 0.5·(-0.5) = 0.25
    prm = torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=D)
    adv, _ = prime(prm, torch.zeros(2, 2, dtype=D), torch.tensor([1.0, 1.0]), ["g", "g"], torch.ones(2, 2),
                   beta=1.0, gamma=0.5)
    torch.testing.assert_close(adv, torch.tensor([[0.25, -0.5], [0.25, -0.5]], dtype=D))


def test_reinforce_pp_global_normalisation():
    # rewards [1, 0, 0, 0, 3]: mean 0.8; centred [0.2, -0.8, -0.8, -0.8, 2.2]
    # population var = (0.04 + 3·0.64 + 4.84)/5 = 6.8/5 = 1.36 → std 1.16619
    adv = reinforce_pp(torch.tensor([1.0, 0.0, 0.0, 0.0, 3.0], dtype=D), eps=0.0)
    s = math.sqrt(1.36)
    torch.testing.assert_close(adv, torch.tensor([0.2, -0.8, -0.8, -0.8, 2.2], dtype=D) / s)


def test_reinforce_pp_baseline_uses_group_mean_and_batch_std():
    # groups a: [1, 0] (mean 0.5), b: [4, 2] (mean 3) → centred [0.5, -0.5, 1, -1]
    # batch population std of centred = sqrt((0.25+0.25+1+1)/4) = sqrt(0.625) = 0.790569
    adv = reinforce_pp_baseline(torch.tensor([1.0, 0.0, 4.0, 2.0], dtype=D), ["a", "a", "b", "b"], eps=0.0)
    torch.testing.assert_close(adv, torch.tensor([0.5, -0.5, 1.0, -1.0], dtype=D) / math.sqrt(0.625))
    # unlike GRPO, group b's larger spread keeps a larger advantage than group a's
    assert adv[2] > adv[0]


def test_mopd_advantage_is_detached_teacher_minus_prox_and_masked():
    # teacher log p [-1, -2, -9], prox [-1.5, -1, nan at obs]: A = [0.5, -1, 0 (masked)]
    teacher = torch.tensor([[-1.0, -2.0, -9.0]], dtype=D)
    prox = torch.tensor([[-1.5, -1.0, float("nan")]], dtype=D, requires_grad=True)
    adv = mopd(teacher, prox, torch.tensor([[1, 1, 0]]))
    assert adv.tolist() == [[0.5, -1.0, 0.0]]
    assert not adv.requires_grad
