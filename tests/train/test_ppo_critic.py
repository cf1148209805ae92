"""PPO with a critic: GAE advantages worked by hand from a Batch; the critic learns during value pretraining."""

import copy

import pytest
import torch

from tracerl.algorithms.batch import collate
from tracerl.algorithms.spec import ALGORITHMS, StepContext
from tracerl.config import load_recipe
from tracerl.errors import UserError
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.train.aux_roles import build_aux_roles
from tracerl.train.roles import PolicyRole, Roles
from tracerl.train.update import rl_update

from tests_credit_helpers import episode

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}


def test_gae_advantage_as_the_trainer_computes_it():
    # prompt [1, 2] | action [3] (pos 2) | observation [4] (pos 3) | action [5, 6] (pos 4, 5), reward 1
    batch = collate([episode("A", "g", ["s0", "s1"], [[3], [5, 6]], 1.0)], pad_id=0, truncation="keep")
    values = torch.tensor([[0, 0, 0.5, 0, 0.25, 0.75]])
    # γ = 1, λ = 0.5, the observation skipped: δ5 = 1 − 0.75 = 0.25, A5 = 0.25
    # δ4 = 0.75 − 0.25 = 0.5, A4 = 0.5 + 0.5·0.25 = 0.625;  δ2 = 0.25 − 0.5 = −0.25, A2 = −0.25 + 0.5·0.625 = 0.0625
    adv, stats = ALGORITHMS["ppo"](lam_policy=0.5).advantages(batch, batch.reward_B, {"values": values})
    assert torch.allclose(adv, torch.tensor([[0, 0, 0.0625, 0, 0.625, 0.25]]))
    # λ_value = 1: every return is the episode reward 1, so the value mean is (0.5 + 0.25 + 0.75)/3 = 0.5
    assert stats["critic/return_mean"] == 1.0 and stats["critic/value_mean"] == 0.5
    # length-adaptive: l = 3 action tokens, α = 2/3 → λ = 1 − 1/(2/3 · 3) = 0.5, the same advantages
    adv2, s2 = ALGORITHMS["ppo"](alpha=2 / 3).advantages(batch, batch.reward_B, {"values": values})
    assert torch.allclose(adv2, adv) and abs(s2["critic/lam_policy_mean"] - 0.5) < 1e-6


def test_value_target_in_the_critic_loss_is_the_monte_carlo_return():
    batch = collate([episode("A", "g", ["s0"], [[3, 5]], 1.0)], pad_id=0, truncation="keep")
    old = torch.tensor([[0, 0, 0.2, 0.6]])
    new = torch.tensor([[0, 0, 0.5, 0.6]], requires_grad=True)
    loss, s = ALGORITHMS["ppo"](value_clip=0.1).role_loss("critic", batch, new, {"values": old}, batch.reward_B,
                                                          StepContext(max_tokens=10))
    # returns 1, 1; token 2: unclipped (0.5−1)² = 0.25, clipped V = 0.2 + 0.1 = 0.3 → (0.3−1)² = 0.49 → max 0.49
    # token 3: (0.6 − 1)² = 0.16 both ways; loss = ½·(0.49 + 0.16)/2 = 0.1625
    assert abs(float(loss.detach()) - 0.1625) < 1e-6 and float(s["value_clip_frac"]) == 0.5


def _rollouts(model, tok, spec, n=8):
    return run_episodes(TorchEngine(model, tok), spec, spec.generate("train", n, 0), [f"g{i // 4}" for i in range(n)],
                        budgets=LoopBudgets(1, 96, 6), sampling=SAMPLING, policy_version=0, seed=0,
                        generator=torch.Generator().manual_seed(0))


def test_value_pretraining_lowers_the_value_loss_and_leaves_the_policy(tiny, parity_env):
    model0, tok = tiny
    recipe = load_recipe("smoke", ["rl.algorithm.name=ppo", "rl.algorithm.kl.coef=0", "roles.critic.pretrain_steps=8", "roles.critic.lr=0.003",
                                   "rl.truncation=keep", "env.max_new_tokens=6"])
    torch.manual_seed(0)
    model = copy.deepcopy(model0)
    trajs = _rollouts(model, tok, parity_env)
    batch = collate(trajs, pad_id=tok.pad_token_id, truncation="keep")
    assert 0 < float(batch.reward_B.sum()) < batch.size  # a signal to fit
    roles = Roles(PolicyRole(model, lr=0.01, max_grad_norm=1.0, sampling=SAMPLING),
                  aux=build_aux_roles(recipe, model, None))
    losses = []
    for step in range(8):
        stats, _ = rl_update(recipe.rl.algorithm, roles, batch, batch.reward_B, minibatches=2,
                             ctx=StepContext(max_tokens=96, step=step))
        assert "updates" not in stats  # pretraining: no policy step
        losses.append(stats["critic/value_loss"])
    # a zero-initialised head starts at ½·mean(R²) over the tokens; the fit must improve on it
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(torch.equal(p, q) for p, q in zip(model.state_dict().values(), model0.state_dict().values()))
    stats, _ = rl_update(recipe.rl.algorithm, roles, batch, batch.reward_B, minibatches=2,
                         ctx=StepContext(max_tokens=96, step=8))
    assert stats["updates"] == 2.0 and "explained_variance" in "".join(stats)  # now the policy trains too


def test_a_role_set_for_an_algorithm_that_does_not_use_it_is_a_load_error():
    with pytest.raises(UserError, match="roles.critic is set but rl.algorithm grpo does not use it"):
        load_recipe("smoke", ["roles.critic.pretrain_steps=2"])
    with pytest.raises(UserError, match="needs at least one teacher"):
        load_recipe("smoke", ["rl.algorithm.name=mopd"])
    with pytest.raises(UserError, match="mopd trains with its ratio-band distillation loss, so clip_high"):
        load_recipe("smoke", ["rl.algorithm.name=mopd", "rl.algorithm.clip_high=0.3",
                              "roles.teachers=[{name: t, path: x}]"])
