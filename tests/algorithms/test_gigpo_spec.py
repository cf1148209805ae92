"""GiGPO as the trainer computes it: from collated trajectories to per-token advantages."""

import torch

from tracerl.algorithms.batch import collate
from tracerl.algorithms.spec import ALGORITHMS
from tracerl.contract import TerminalReason

from tests_credit_helpers import episode


def test_two_trajectories_through_one_state_get_the_hand_worked_step_advantage():
    # group g: A visits s0 → s1 → s2 and wins (R=1); B visits s0 → s3 → s1 and loses (R=0);
    # C is an infrastructure failure from s0 with R=1 (must not count); D (group h) also visits s1.
    trajs = [episode("A", "g", ["s0", "s1", "s2"], [[3], [5, 6], [8]], 1.0),
             episode("B", "g", ["s0", "s3", "s1"], [[3], [5], [8, 9]], 0.0),
             episode("C", "g", ["s0"], [[3]], 1.0, reason=TerminalReason.INFRA_FAILURE),
             episode("D", "h", ["s1"], [[3]], 1.0)]
    batch = collate(trajs, pad_id=0, truncation="keep")
    algo = ALGORITHMS["gigpo"](omega=1.0, gamma=0.5, scale="std")
    adv_BT, stats = algo.advantages(batch, batch.reward_B, {})
    # step returns (reward on the last turn, γ = 0.5): A [0.25, 0.5, 1], B [0, 0, 0]
    # episode: A 0.25, B 0 → mean 0.125, std 0.125 → A^E = +1 (A), −1 (B); D alone in h → 0
    # anchors in g: s0 {A 0.25, B 0} → ±1; s1 {A 0.5 (turn 1), B 0 (turn 2)} → ±1; s2, s3 singletons → 0
    # A = [1+1, 1+1, 1+0] = [2, 2, 1];  B = [−1−1, −1+0, −1−1] = [−2, −1, −2]
    want = {"A": [2, 2, 1], "B": [-2, -1, -2], "C": [0], "D": [0]}
    for i, t in enumerate(trajs):
        per_turn = [float(adv_BT[i, s.start]) for s in t.spans if s.kind == "action"]
        assert torch.allclose(torch.tensor(per_turn), torch.tensor(want[t.trajectory_id], dtype=torch.float),
                              atol=1e-4), (t.trajectory_id, per_turn)
    # every token of a turn carries its turn's advantage: A's turn 1 is two tokens, B's turn 2 too
    a_turn1 = trajs[0].spans[2]
    assert torch.allclose(adv_BT[0, a_turn1.start:a_turn1.end], torch.tensor([2.0, 2.0]), atol=1e-4)
    assert float(adv_BT[2].abs().sum()) == 0.0 and float(adv_BT[:, :2].abs().sum()) == 0.0  # C; prompts
    # anchors: (g, s0) (g, s1) (g, s2) (g, s3) (h, s1) → 5 groups of sizes 2, 2, 1, 1, 1 → mean 7/5
    assert stats["gigpo/anchor_groups"] == 5.0
    assert abs(stats["gigpo/anchor_mean_size"] - 1.4) < 1e-6


def test_with_no_repeated_state_gigpo_is_grpo():
    # two single-turn episodes from distinct states: no anchor repeats, A = A^E = GRPO's ±1
    trajs = [episode("A", "g", ["x"], [[3]], 1.0), episode("B", "g", ["y"], [[3]], 0.0)]
    batch = collate(trajs, pad_id=0, truncation="keep")
    adv, _ = ALGORITHMS["gigpo"](gamma=0.9).advantages(batch, batch.reward_B, {})
    grpo, _ = ALGORITHMS["grpo"]().advantages(batch, batch.reward_B, {})
    assert torch.allclose(adv, grpo, atol=1e-6)
