"""`learner.optimizer: adamw_fused`: torch's fused AdamW kernel for every model the run trains. Its step is
AdamW's (worked by hand, and within float rounding of the default kernel's), a checkpoint saved under the other
kernel does not switch it back, and the setting reaches the policy in one process and on the ranks of a
sharded learner."""

import copy

import pytest
import torch

from tracerl.train.optim import make_optimizer, optimizer_step
from tracerl.train.shards import restore_hyper_params


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def test_fused_step_is_adamw_worked_by_hand():
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -2.0]]))
    opt = make_optimizer(model, lr=0.1, kernel="adamw_fused")
    assert opt.param_groups[0]["fused"] is True
    loss = model(torch.tensor([[3.0, -4.0]])).sum()  # gradient (3, -4): the first AdamW step is lr * sign(g)
    optimizer_step(opt, list(model.parameters()), loss, max_grad_norm=100.0)
    torch.testing.assert_close(model.weight.detach(), torch.tensor([[0.9, -1.9]]), rtol=0, atol=1e-6)


def test_fused_and_default_kernels_take_the_same_steps_up_to_rounding():
    a, b = _model(), _model()
    opt_a, opt_b = make_optimizer(a, lr=1e-2, weight_decay=0.1), make_optimizer(b, lr=1e-2, weight_decay=0.1,
                                                                                 kernel="adamw_fused")
    assert not opt_a.param_groups[0]["fused"] and opt_b.param_groups[0]["fused"]
    g = torch.Generator().manual_seed(1)
    start = copy.deepcopy(a.state_dict())
    for _ in range(5):
        x = torch.randn(4, 8, generator=g)
        optimizer_step(opt_a, list(a.parameters()), a(x).pow(2).sum(), max_grad_norm=1.0)
        optimizer_step(opt_b, list(b.parameters()), b(x).pow(2).sum(), max_grad_norm=1.0)
    for k, v in a.state_dict().items():
        assert (v - start[k]).abs().max() > 1e-3  # they moved
        torch.testing.assert_close(b.state_dict()[k], v, rtol=0, atol=1e-6)


def test_a_checkpoint_of_the_other_kernel_does_not_switch_it():
    model = _model()
    saved = make_optimizer(model, lr=1e-3).state_dict()  # taken under the default kernel: fused None
    fused = make_optimizer(model, lr=1e-3, kernel="adamw_fused")
    fused.load_state_dict(saved)
    assert fused.param_groups[0]["fused"] is True
    restore_hyper_params(fused, saved["param_groups"])  # a sharded checkpoint's hyper-parameters
    assert fused.param_groups[0]["fused"] is True
    default = make_optimizer(model, lr=1e-3)
    default.load_state_dict(fused.state_dict())
    assert not default.param_groups[0]["fused"]


def test_the_recipe_setting_reaches_the_policy_and_the_critic():
    from tracerl.config import load_recipe
    from tracerl.train.learner import _packing
    from tracerl.train.roles import PolicyRole

    recipe = load_recipe("smoke", ["learner.optimizer=adamw_fused"])
    assert _packing(recipe) == {"optimizer": "adamw_fused"}
    assert _packing(load_recipe("smoke")) == {}
    role = PolicyRole(_model(), lr=1e-3, max_grad_norm=1.0, sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0},
                      **_packing(recipe))
    assert role.optimizer.param_groups[0]["fused"] is True
    from tracerl.models.tiny import build_model
    from tracerl.train.aux_roles import build_aux_roles

    ppo = load_recipe("smoke", ["rl.algorithm.name=ppo", "learner.optimizer=adamw_fused"])
    lm = build_model(64, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_positions=64, seed=0,
                     pad_token_id=0, eos_token_id=1)
    critic = build_aux_roles(ppo, lm, None)["critic"]
    assert critic.trained.optimizer.param_groups[0]["fused"] is True


def _sharded_fused():
    """Rank 0: one rl_update of the 2-rank sharded policy and of the single-process one, both fused."""
    from test_fsdp_learner import _batch, max_diff, tiny_model

    from tracerl.algorithms.spec import ALGORITHMS, StepContext
    from tracerl.train.fsdp_group import ShardedPolicyRole
    from tracerl.train.roles import PolicyRole, Roles
    from tracerl.train.update import rl_update

    model, batch = tiny_model(), _batch()
    kw = dict(lr=3e-3, max_grad_norm=0.05, sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0},
              optimizer="adamw_fused")
    single = Roles(PolicyRole(copy.deepcopy(model), **kw))
    sharded = Roles(ShardedPolicyRole(copy.deepcopy(model), **kw, ranks=2, threads=1))
    for roles in (single, sharded):
        torch.manual_seed(0)
        rl_update(ALGORITHMS["grpo"](), roles, batch, batch.reward_B, minibatches=2,
                  ctx=StepContext(max_tokens=64, step=0))
    return {"fused": sharded.policy.state_dict()["optimizer"]["param_groups"][0]["fused"],
            "diff": max_diff(single.policy.model.state_dict(), sharded.policy.model.state_dict()),
            "moved": max_diff(single.policy.model.state_dict(), model.state_dict())}


@pytest.mark.timeout(600)
def test_the_ranks_of_a_sharded_learner_step_fused():
    from test_fsdp_learner import run_controller

    res = run_controller(_sharded_fused)
    assert res["fused"] is True
    assert res["moved"] > 1e-3 and res["diff"] < 2e-5, res
