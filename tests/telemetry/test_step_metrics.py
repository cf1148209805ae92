"""`step_metrics` on a five-episode fixture whose every number is worked out by hand below.

Episodes (behavior log-prob −0.5 on every action token; reward = 1·correct + 0.5·format):
  A  group g1, correct,   turns of 2 and 3 action tokens, python ok (0.2 s) between, version 2
  B  group g1, incorrect, turns of 1 and 3 tokens, an invalid_action observation between, version 1
  C  group g2, incorrect, turns of 2 and 2 tokens, python error (0.6 s) between, version 2
  D  group g2, incorrect, one turn of 6 tokens, truncated at max_tokens, version 2
  E  group g3, infra failure after 1 action token, no reward, version 2
"""

import math

import pytest
import torch

from tracerl.contract import TerminalReason, TokenRole, Trajectory, ids_sha256, validate
from tracerl.telemetry import step_metrics


def episode(tid, group, turns, *, correct, version, obs=None, reason=TerminalReason.EOS, source="arith"):
    t = Trajectory(trajectory_id=tid, group_id=group, task_id=f"task-{group}", env_name="toy", task_source=source)
    t.append([1, 2], TokenRole.PROMPT)
    for i, n in enumerate(turns):
        ids = list(range(100, 100 + n))
        s, e = t.append(ids, TokenRole.ACTION, logprobs=[-0.5] * n, policy_version=version)
        t.add_span("action", s, e, sampled_ids_sha256=ids_sha256(ids))
        if obs is not None and i < len(turns) - 1:
            status, latency = obs
            s, e = t.append([7, 8], TokenRole.OBSERVATION)
            t.add_span("observation", s, e, tool_name="python", tool_status=status, tool_latency_s=latency,
                       tool_request=f"print({tid})")
    if reason == TerminalReason.INFRA_FAILURE:
        t.set_reward({"correct": 0.0, "format": 0.0}, {"correct": 1.0, "format": 0.5})
    else:
        t.set_reward({"correct": correct, "format": 1.0}, {"correct": 1.0, "format": 0.5})
    t.finish(reason)
    return validate(t)


def fixture():
    return [
        episode("A", "g1", [2, 3], correct=1.0, version=2, obs=("ok", 0.2)),
        episode("B", "g1", [1, 3], correct=0.0, version=1, obs=("invalid_action", None)),
        episode("C", "g2", [2, 2], correct=0.0, version=2, obs=("error", 0.6)),
        episode("D", "g2", [6], correct=0.0, version=2, reason=TerminalReason.MAX_TOKENS),
        episode("E", "g3", [1], correct=0.0, version=2, reason=TerminalReason.INFRA_FAILURE),
    ]


def test_episode_metrics_by_hand():
    m = step_metrics(fixture(), policy_version=2)
    # 5 episodes, 1 truncated (D) → 0.2; 1 infra failure (E)
    assert m["rollout/episodes"] == 5 and m["rollout/infra_failures"] == 1
    assert m["rollout/truncation_rate"] == pytest.approx(0.2)
    # trainable rewards A..D = 1.5, 0.5, 0.5, 0.5: mean 0.75; deviations .75,-.25,-.25,-.25 →
    # var = (0.5625 + 3·0.0625) / 4 = 0.1875, std = 0.4330
    assert m["reward/mean"] == pytest.approx(0.75)
    assert m["reward/std"] == pytest.approx(math.sqrt(0.1875))
    assert m["reward/correct"] == pytest.approx(0.25) and m["reward/format"] == pytest.approx(1.0)
    # g1 {1.5, 0.5} var 0.25; g2 {0.5, 0.5} var 0 → half the groups zero-variance; g3 has no trainable episode
    assert m["groups/count"] == 2
    assert m["groups/zero_var_frac"] == pytest.approx(0.5)
    assert m["groups/reward_var_mean"] == pytest.approx(0.125)
    # action lengths A5 B4 C4 D6: mean 4.75, median of [4,4,5,6] = 4.5; correct {5}, incorrect {4,4,6} mean 14/3
    assert m["length/mean"] == pytest.approx(4.75) and m["length/p50"] == pytest.approx(4.5)
    assert m["length/correct_mean"] == pytest.approx(5.0)
    assert m["length/incorrect_mean"] == pytest.approx(14 / 3)
    # tool spans: ok, invalid_action, error → 3 calls over 5 episodes = 0.6; 2 not ok → 2/3
    assert m["tool/calls_per_episode"] == pytest.approx(0.6)
    assert m["tool/error_rate"] == pytest.approx(2 / 3)
    assert m["tool/status_error"] == 1 and m["tool/status_invalid_action"] == 1
    # latencies 0.2 and 0.6 recorded → mean 0.4
    assert m["tool/latency_mean_s"] == pytest.approx(0.4)
    # action turns 2+2+2+1+1 = 8, one invalid → 0.125
    assert m["env/invalid_action_rate"] == pytest.approx(0.125)
    # action tokens 5+4+4+6+1 = 20; B's 4 tokens lag 2 − 1 = 1, the rest 0 → mean 4/20 = 0.2
    assert m["staleness/mean"] == pytest.approx(0.2)
    assert m["staleness/max"] == 1 and m["staleness/stale_token_frac"] == pytest.approx(0.2)
    assert m["source/arith/episodes"] == 5 and m["source/arith/truncated"] == 1
    # distinct programs: g1 has one program sequence (B's requests are "print(B)") plus A's → 2; g2: C only → 1
    assert m["groups/distinct_programs"] == pytest.approx(1.5)


def test_learner_inputs_by_hand():
    trajs = fixture()
    adv_B = torch.tensor([1.0, -1.0, 0.0, 0.0, 0.0])
    # entropy per action token (action-only layout): A 0.5, B 1.0, C and D 2.0, E 4.0
    entropy = [[0.5] * 5, [1.0] * 4, [2.0] * 4, [2.0] * 6, [4.0]]
    # current log-probs, full-length layout: A's action tokens gain ln 2 (weight 2), the rest weight 1
    logprobs = torch.full((5, 12), -0.5)
    a_actions = [i for i, r in enumerate(trajs[0].roles) if r == TokenRole.ACTION]
    logprobs[0, a_actions] += math.log(2.0)
    m = step_metrics(trajs, advantages=adv_B, token_entropy=entropy, logprobs=logprobs, clip=(0.2, 0.28),
                     loss_stats={"approx_kl": torch.tensor(0.01), "clip_frac_low": 0.1},
                     timings={"rollout": 2.0, "learner": 1.0}, policy_version=2)
    # entropy: (5·0.5 + 4·1 + 4·2 + 6·2 + 1·4) / 20 = 30.5 / 20 = 1.525
    assert m["policy/entropy"] == pytest.approx(1.525)
    # by advantage sign: + → A 0.5; − → B 1.0; 0 → C, D, E: (4·2 + 6·2 + 1·4) / 11 = 24/11
    assert m["policy/entropy_adv_pos"] == pytest.approx(0.5)
    assert m["policy/entropy_adv_neg"] == pytest.approx(1.0)
    assert m["policy/entropy_adv_zero"] == pytest.approx(24 / 11)
    # weights: five 2s, fifteen 1s → Σw = 25, Σw² = 35, ESS = 625/35 = 17.857, fraction /20 = 0.89286
    assert m["is/ess"] == pytest.approx(625 / 35)
    assert m["is/ess_frac"] == pytest.approx(625 / 35 / 20)
    # k3 KL to behavior: 5 · ((2 − 1) − ln 2) / 20
    assert m["policy/kl_behavior"] == pytest.approx(5 * (1 - math.log(2)) / 20)
    # A's ratio 2 > 1.28 with A > 0 → 5/20 clipped high; clip_frac_low comes from the loss stats (0.1)
    assert m["policy/clip_frac_high"] == pytest.approx(0.25)
    assert m["policy/clip_frac_low"] == pytest.approx(0.1)
    assert m["policy/approx_kl"] == pytest.approx(0.01)
    # 20 generated tokens over 2 s of rollout
    assert m["time/rollout_s"] == 2.0 and m["time/learner_s"] == 1.0
    assert m["throughput/tokens_per_s"] == pytest.approx(10.0)


def test_layout_mismatch_names_the_input():
    with pytest.raises(ValueError, match="token_entropy"):
        step_metrics(fixture(), token_entropy=[[1.0, 2.0]] * 4)
