"""MOPD's `until_error`: the failed turns collated from spans, and the loss worked by hand from a Batch
with the tokens after a trajectory's first failed action left out."""

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


@pytest.mark.parametrize("until_error, expected", [
    # advantages log π_T − (−1): row A 0.5, −0.5 | −1.0 | −3.0, row B 0.0 | 0.8; ratio 1 everywhere.
    # until_error drops row A's turn 2 (after its first failure): −(0.5 − 0.5 − 1.0 + 0.0 + 0.8) / 5 = 0.04
    (True, 0.04),
    # every action token: −(−0.2 − 3.0) / 6
    (False, 3.2 / 6),
])
def test_loss_worked_by_hand(until_error, expected):
    batch = _batch()
    teacher = torch.zeros_like(batch.behavior_BT)
    teacher[0, [2, 3, 5, 7]] = torch.tensor([-0.5, -1.5, -2.0, -4.0])
    teacher[1, [2, 4]] = torch.tensor([-1.0, -0.2])
    scores = {"teacher/t": teacher}
    algo = ALGORITHMS["mopd"](until_error=until_error)
    adv, stats = algo.advantages(batch, batch.reward_B, scores)
    out = PolicyOutput(logprobs_BT=batch.behavior_BT.clone(), full_logprobs_BT=batch.behavior_BT.clone(), entropy_BT=None)
    loss, _ = algo.loss(batch, out, scores, adv, batch.reward_B, StepContext(max_tokens=8))
    assert abs(float(loss) - expected) < 1e-6
    assert float(adv[0, 7]) == (0.0 if until_error else -3.0)
    if until_error:
        assert abs(stats["mopd/until_error_frac"] - 5 / 6) < 1e-6
        assert abs(stats["mopd/reverse_kl/t"] - 0.2 / 5) < 1e-6  # over the kept tokens: −(0.5 − 0.5 − 1 + 0 + 0.8) / 5
    else:
        assert "mopd/until_error_frac" not in stats


def test_the_recipe_key_parses():
    algo = load_recipe("mopd", ["rl.algorithm.until_error=true"]).rl.algorithm
    assert algo.until_error is True
    assert load_recipe("mopd", []).rl.algorithm.until_error is False
