"""The RL step's correctness rules, with numbers worked by hand: processed-distribution ratios,
infra failures outside the group baseline, the truncation penalty, REINFORCE++'s batch statistics."""

import copy
import math

import pytest
import torch

from tracerl.algorithms.batch import collate
from tracerl.algorithms.spec import ALGORITHMS, StepContext
from tracerl.contract import TerminalReason, TokenRole, Trajectory
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.train.roles import PolicyRole, Roles
from tracerl.train.update import rl_update


def _traj(i: int, group: str, reward: float, reason=TerminalReason.EOS) -> Trajectory:
    t = Trajectory(trajectory_id=f"t{i}", group_id=group, task_id="x", env_name="e")
    t.append([1, 2], TokenRole.PROMPT)
    s, e = t.append([3, 4, 5], TokenRole.ACTION, logprobs=[-1.0, -1.0, -1.0], policy_version=0)
    t.add_span("action", s, e)
    t.set_reward({"r": reward}, {"r": 1.0})
    t.finish(reason)
    return t


def _adv_B(name, trajs, **kw):
    batch = collate(trajs, pad_id=0, **kw)
    adv_BT, stats = ALGORITHMS[name]().advantages(batch, batch.reward_B, {})
    return [round(float(a), 4) for a in adv_BT[:, 3]], batch, stats  # token 3 is the first action token


def test_infra_failure_leaves_its_group_baseline():
    # group g: [infra, 1, 0, 0] -> baseline over the three trainable members: mean 1/3,
    # population std sqrt(((2/3)^2 + 2 (1/3)^2) / 3) = sqrt(2)/3 = 0.4714;
    # advantages (2/3)/0.4714 = 1.4142 and (-1/3)/0.4714 = -0.7071; the infra row gets 0 and weight 0.
    # group h: [infra, 1, 1, 1] -> all trainable members equal: 0, not (1 - 3/4)/std = +0.577.
    trajs = [_traj(0, "g", 0.0, TerminalReason.INFRA_FAILURE), _traj(1, "g", 1.0), _traj(2, "g", 0.0),
             _traj(3, "g", 0.0), _traj(4, "h", 0.0, TerminalReason.INFRA_FAILURE), _traj(5, "h", 1.0),
             _traj(6, "h", 1.0), _traj(7, "h", 1.0)]
    adv, batch, _ = _adv_B("grpo", trajs)
    assert adv == [0.0, 1.4142, -0.7071, -0.7071, 0.0, 0.0, 0.0, 0.0]
    assert batch.weight_B.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    # a group left with one trainable member contributes nothing: RLOO's leave-one-out is undefined -> 0
    adv, _, _ = _adv_B("rloo", [_traj(0, "g", 0.0, TerminalReason.INFRA_FAILURE), _traj(1, "g", 1.0)])
    assert adv == [0.0, 0.0]


def test_truncation_policies():
    trajs = [_traj(0, "g", 0.0, TerminalReason.MAX_TOKENS), _traj(1, "g", 1.0), _traj(2, "g", 0.0)]
    penal = collate(trajs, pad_id=0, truncation="penalize", truncation_penalty=-1.0)
    assert penal.reward_B.tolist() == [-1.0, 1.0, 0.0] and penal.weight_B.tolist() == [1.0, 1.0, 1.0]
    masked = collate(trajs, pad_id=0, truncation="mask")
    assert masked.reward_B.tolist() == [0.0, 1.0, 0.0] and masked.weight_B.tolist() == [0.0, 1.0, 1.0]
    kept = collate(trajs, pad_id=0, truncation="keep")
    assert kept.reward_B.tolist() == [0.0, 1.0, 0.0] and kept.weight_B.tolist() == [1.0, 1.0, 1.0]
    # penalize changes the advantages: rewards [-1, 1, 0], mean 0, std sqrt(2/3) = 0.8165 -> -1.2247, 1.2247, 0
    adv, _, _ = _adv_B("grpo", trajs, truncation="penalize")
    assert adv == [-1.2247, 1.2247, 0.0]


def test_reinforce_pp_normalises_over_the_batch():
    # rewards [1, 0, 0, 1, 1, 0] in two groups: batch mean 0.5, std 0.5 -> ±1; the stats say mean 0, std 1
    trajs = [_traj(i, "g" if i < 3 else "h", r) for i, r in enumerate([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])]
    adv, _, stats = _adv_B("reinforce_pp", trajs)
    assert adv == [1.0, -1.0, -1.0, 1.0, 1.0, -1.0]
    assert stats["adv/mean"] == pytest.approx(0.0) and stats["adv/std"] == pytest.approx(1.0, abs=1e-5)


def test_overlong_penalty_shapes_the_reward():
    # length 5 tokens, L_max 6, L_cache 2: soft start 4 -> (4 - 5) / 2 = -0.5
    trajs = [_traj(0, "g", 1.0), _traj(1, "g", 0.0)]
    batch = collate(trajs, pad_id=0)
    algo = ALGORITHMS["dapo"](overlong={"cache_len": 2})
    rewards, stats = algo.shape_rewards(batch, trajs, StepContext(max_tokens=6))
    assert rewards.tolist() == [0.5, -0.5] and stats["reward/overlong_penalty"] == -0.5


def test_overlong_penalty_uses_each_rows_own_budget():
    # an envs: run: both rows are 5 tokens long; row 0's environment allows 6 (cache 2: soft start 4 ->
    # (4 - 5) / 2 = -0.5), row 1's allows 40 (cache min(2, 40) = 2: soft start 38 -> 0). Under the run's
    # longest budget (40) neither would be penalised.
    trajs = [_traj(0, "g", 1.0), _traj(1, "g", 0.0)]
    batch = collate(trajs, pad_id=0)
    algo = ALGORITHMS["dapo"](overlong={"cache_len": 2})
    rewards, _ = algo.shape_rewards(batch, trajs, StepContext(max_tokens=40, max_tokens_B=torch.tensor([6, 40])))
    assert rewards.tolist() == [0.5, 0.0]
    rewards, _ = algo.shape_rewards(batch, trajs, StepContext(max_tokens=40))
    assert rewards.tolist() == [1.0, 0.0]


def _sampled_update(tiny, env, sampling, *, lr, minibatches):
    """Sample 2 groups of 4 with `sampling`, then one GRPO update on rewards [1,0,0,0], [0,1,1,0]."""
    model, tok = tiny
    model = copy.deepcopy(model)
    trajs = run_episodes(TorchEngine(model, tok), env, env.generate("train", 8, 0), [f"g{i // 4}" for i in range(8)],
                         budgets=LoopBudgets(1, 96, 12), sampling=sampling, policy_version=0, seed=0,
                         generator=torch.Generator().manual_seed(0))
    batch = collate(trajs, pad_id=tok.pad_token_id, truncation="keep")
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    roles = Roles(PolicyRole(model, lr=lr, max_grad_norm=1.0, sampling=sampling))
    stats, _ = rl_update(ALGORITHMS["grpo"](), roles, batch, rewards, minibatches=minibatches,
                         ctx=StepContext(max_tokens=96))
    return stats, batch


@pytest.mark.parametrize("sampling", [{"temperature": 1.0, "top_p": 0.7, "top_k": 20},
                                      {"temperature": 0.7, "top_p": 1.0, "top_k": 0}])
def test_first_on_policy_update_has_ratio_one(tiny, parity_env, sampling):
    # the learner scores under the engine's processed distribution: on-policy, π_θ/π_behavior = 1
    stats, _ = _sampled_update(tiny, parity_env, sampling, lr=0.01, minibatches=1)
    assert abs(stats["ratio_mean"] - 1.0) < 1e-6
    assert abs(stats["ratio_min"] - 1.0) < 1e-5 and abs(stats["ratio_max"] - 1.0) < 1e-5
    assert stats["clip_frac_low"] == 0.0 and stats["clip_frac_high"] == 0.0
    assert stats["ess_frac"] == pytest.approx(1.0, abs=1e-6)


def test_ess_drifts_below_one_after_the_first_minibatch(tiny, parity_env):
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
    stats, batch = _sampled_update(tiny, parity_env, sampling, lr=0.05, minibatches=4)
    # both groups have reward variance, so every token is trained: ESS / ESS fraction = the token count
    assert 0.0 < stats["ess_frac"] < 1.0
    assert math.isclose(stats["ess"] / stats["ess_frac"], float(batch.mask_BT.sum()), rel_tol=1e-4)


class _FlakyEnv:
    """Every other episode ends in an infrastructure failure; the rest succeed."""

    name, revision, count = "flaky", "1", 0

    def reset(self, task, seed):
        return [{"role": "user", "content": "go"}]

    def step(self, action_text):
        from tracerl.envs import Step

        _FlakyEnv.count += 1
        if _FlakyEnv.count % 2:
            return Step(terminated=True, terminal_reason=TerminalReason.INFRA_FAILURE, info={"tool_status": "crash"})
        return Step(terminated=True, terminal_reason=TerminalReason.ENV_SUCCESS, reward_components={"correct": 1.0})

    def state_hash(self):
        return "s"


def test_eval_reports_infra_failures_in_their_own_column(tiny, parity_env):
    from tracerl.envs.base import EnvSpec
    from tracerl.eval.heldout import run_heldout

    model, tok = tiny
    spec = EnvSpec(name="flaky", revision="1", make=_FlakyEnv, generate=parity_env.generate, expert=parity_env.expert,
                   reward_weights={"correct": 1.0}, stop_strings=(), special_tokens=parity_env.special_tokens)
    _FlakyEnv.count = 0
    res = run_heldout(TorchEngine(model, tok), spec, parity_env.generate("heldout", 4, 0), samples=2, ks=[1],
                      budgets=LoopBudgets(1, 96, 4), sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0},
                      policy_version=0, seed=0)
    # 8 episodes in one batch, stepped in order: odd calls fail -> 4 infra failures, 4 successes
    m = res.metrics()
    assert m["eval/infra_failure_rate"] == 0.5 and m["eval/success"] == 0.5
