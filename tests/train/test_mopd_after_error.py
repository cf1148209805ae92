"""MOPD's `after_error`: the failed turns collated from spans, and the loss worked by hand from a Batch
with the tokens after a trajectory's first failed action weighted (0: left out)."""

import pytest
import torch

from tracerl.algorithms.batch import collate
from tracerl.algorithms.spec import ALGORITHMS, PolicyOutput, StepContext
from tracerl.config import load_recipe

from tests_credit_helpers import episode


def _batch():
    # row A: turns at columns [2, 3], [5], [7]; the observation after turn 1 (column 6) failed.
    # row B: turns at columns [2], [4]; nothing failed
    a = episode("A", "g", ["s0", "s1", "s1"], [[3, 5], [6], [7]], 0.0, failed=(1,))
    b = episode("B", "g", ["s0", "s2"], [[3], [6]], 1.0)
    return collate([a, b], pad_id=0, truncation="keep")


def test_collate_marks_the_turn_whose_observation_failed():
    batch = _batch()
    assert batch.failed_BS.tolist() == [[False, True, False], [False, False, False]]
    assert batch.rows([1]).failed_BS.tolist() == [[False, False]]


@pytest.mark.parametrize("after_error, expected", [
    # advantages log π_T − (−1): row A 0.5, −0.5 | −1.0 | −3.0, row B 0.0 | 0.8; ratio 1 everywhere.
    # 0 drops row A's turn 2 (after its first failure): −(0.5 − 0.5 − 1.0 + 0.0 + 0.8) / 5 = 0.04
    (0.0, 0.04),
    # 0.5 halves that token's advantage and keeps it in the denominator: −(−0.2 − 1.5) / 6
    (0.5, 1.7 / 6),
    # every action token: −(−0.2 − 3.0) / 6
    (1.0, 3.2 / 6),
])
def test_loss_worked_by_hand(after_error, expected):
    batch = _batch()
    teacher = torch.zeros_like(batch.behavior_BT)
    teacher[0, [2, 3, 5, 7]] = torch.tensor([-0.5, -1.5, -2.0, -4.0])
    teacher[1, [2, 4]] = torch.tensor([-1.0, -0.2])
    scores = {"teacher/t": teacher}
    algo = ALGORITHMS["mopd"](after_error=after_error)
    adv, stats = algo.advantages(batch, batch.reward_B, scores)
    out = PolicyOutput(logprobs_BT=batch.behavior_BT.clone(), full_logprobs_BT=batch.behavior_BT.clone(), entropy_BT=None)
    loss, _ = algo.loss(batch, out, scores, adv, batch.reward_B, StepContext(max_tokens=8))
    assert abs(float(loss) - expected) < 1e-6
    assert float(adv[0, 7]) == -3.0 * after_error
    if after_error < 1:
        assert abs(stats["mopd/after_error_frac"] - 1 / 6) < 1e-6
    else:
        assert "mopd/after_error_frac" not in stats
    # the reverse KL over the tokens trained: −(0.5 − 0.5 − 1 + 0 + 0.8) / 5 without the dropped one
    assert abs(stats["mopd/reverse_kl/t"] - (0.2 / 5 if after_error == 0 else 3.2 / 6)) < 1e-6


def test_the_support_term_is_weighted_too():
    batch = _batch()
    K = 2
    t_lp = torch.log(torch.tensor([0.75, 0.25])).expand(*batch.ids_BT.shape, K).clone()
    s_lp = torch.log(torch.tensor([0.5, 0.25])).expand(*batch.ids_BT.shape, K).clone()
    scores = {"teacher/t": batch.behavior_BT.clone(), "teacher/t@support_lp": t_lp,
              "teacher/t@support_ids": torch.zeros(*batch.ids_BT.shape, K, dtype=torch.long)}
    out = PolicyOutput(logprobs_BT=batch.behavior_BT.clone(), full_logprobs_BT=batch.behavior_BT.clone(), entropy_BT=None,
                       support_logprobs_BTK=s_lp)
    kl = 0.75 * torch.log(torch.tensor(0.75 / 0.5)).item()  # the same forward KL at every token
    for w, expected in ((1.0, kl), (0.5, kl * 5.5 / 6), (0.0, kl)):  # 0: one token fewer in the mean, none weighted down
        algo = ALGORITHMS["mopd"](support=K, reverse_coef=0.0, after_error=w)
        adv, _ = algo.advantages(batch, batch.reward_B, scores)
        _, st = algo.loss(batch, out, scores, adv, batch.reward_B, StepContext(max_tokens=8))
        assert abs(float(st["mopd_support_kl"]) - expected) < 1e-6


def test_the_recipe_key_parses_and_is_bounded():
    assert load_recipe("mopd", ["rl.algorithm.after_error=0"]).rl.algorithm.after_error == 0.0
    assert load_recipe("mopd", []).rl.algorithm.after_error == 1.0
    with pytest.raises(Exception, match="after_error"):
        load_recipe("mopd", ["rl.algorithm.after_error=2"])
