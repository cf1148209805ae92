"""Gradient accumulation on the ranks of the sharded learner: `learner.max_tokens_per_micro_batch` (and
`learner.packing`) with 2 FSDP2 ranks take the single-process update's step. With a budget of 1 token every
row is its own micro-batch, so each 5-row minibatch gives rank 0 three forwards and rank 1 two: rank 1 pads
with a zero-weight forward (the ranks must run as many as each other, or FSDP's collectives would not line
up) and the weights still equal one process's within 2e-5 over two updates."""

import copy

import pytest
import torch

from tracerl.algorithms.spec import ALGORITHMS, StepContext

from test_fsdp_learner import _batch, max_diff, run_controller, tiny_model

KW = dict(lr=3e-3, max_grad_norm=0.05, sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0})


def _cases() -> dict:
    from tracerl.train.fsdp_group import ShardedPolicyRole
    from tracerl.train.minibatch import minibatch_rows
    from tracerl.train.packing import micro_batches
    from tracerl.train.roles import PolicyRole, Roles
    from tracerl.train.update import rl_update

    model, batch = tiny_model(), _batch()
    algo = ALGORITHMS["grpo"]()
    res = {}
    torch.manual_seed(0)  # the rows rl_update's first minibatches take, and each rank's micro-batch count
    keep = ((batch.weight_B > 0) & (batch.mask_BT.sum(1) > 0)).nonzero().flatten()
    res["counts"] = [[len(micro_batches(batch.length_B[s[r::2]].tolist(), 1, packed=False)) for r in (0, 1)]
                     for s in minibatch_rows(batch, keep, 2)]
    for name, extra in (("budget", {"max_tokens_per_micro_batch": 1}),
                        ("packed", {"max_tokens_per_micro_batch": 64, "packing": True, "share_prefix": False})):
        single = Roles(PolicyRole(copy.deepcopy(model), **KW))
        sharded = Roles(ShardedPolicyRole(copy.deepcopy(model), **KW, **extra, ranks=2, threads=1))
        for step in range(2):
            ctx = StepContext(max_tokens=64, step=step)
            torch.manual_seed(step)
            s1, _ = rl_update(algo, single, batch, batch.reward_B, minibatches=2, ctx=ctx)
            torch.manual_seed(step)
            s2, _ = rl_update(algo, sharded, batch, batch.reward_B, minibatches=2, ctx=ctx)
            res[name, step] = {"diff": max_diff(single.policy.model.state_dict(), sharded.policy.model.state_dict()),
                               "moved": max_diff(single.policy.model.state_dict(), model.state_dict()),
                               "loss": (s1["loss"], s2["loss"]), "grad_norm": (s1["grad_norm"], s2["grad_norm"])}
    return res


@pytest.mark.timeout(600)
def test_micro_batches_and_packing_on_two_ranks_equal_one_process():
    res = run_controller(_cases)
    assert res["counts"] == [[3, 2], [3, 2]]  # uneven: rank 1 pads one forward in each minibatch
    for name in ("budget", "packed"):
        for step in range(2):
            r = res[name, step]
            assert r["moved"] > 1e-3 and r["diff"] < 2e-5, (name, step, r)
            assert r["loss"][1] == pytest.approx(r["loss"][0], rel=1e-4, abs=1e-6)
            assert r["grad_norm"][1] == pytest.approx(r["grad_norm"][0], rel=1e-4)


def test_micro_batch_settings_load_with_ranks_and_reach_the_sharded_role():
    from tracerl.config import load_recipe
    from tracerl.train.learner import _packing, _policy_role

    recipe = load_recipe("smoke", ["learner.ranks=2", "learner.max_tokens_per_micro_batch=64", "learner.packing=true",
                                   "learner.share_prefix=false"])
    assert _policy_role(recipe).keywords == {"ranks": 2, "threads": 2}
    assert _packing(recipe) == {"packing": True, "max_tokens_per_micro_batch": 64}
