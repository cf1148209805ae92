"""The KL penalty to a frozen reference: zero against itself, and a step with no advantage moves toward it."""

import copy

import torch

from tracerl.algorithms.batch import collate
from tracerl.algorithms.spec import StepContext
from tracerl.config import load_recipe
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.train.batch import action_mask, pad_batch, token_logprobs
from tracerl.train.roles import FrozenRole, PolicyRole, Roles
from tracerl.train.update import rl_update

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}


def _update(model, ref, trajs, recipe, pad_id, algo=None):
    roles = Roles(PolicyRole(model, lr=0.01, max_grad_norm=1.0, sampling=SAMPLING),
                  FrozenRole(ref, temperature=1.0) if ref is not None else None)
    batch = collate(trajs, pad_id=pad_id, truncation="keep")
    stats, _ = rl_update(algo or recipe.rl.algorithm, roles, batch, torch.zeros(batch.size), minibatches=1,
                         ctx=StepContext(max_tokens=recipe.env.max_tokens))
    return stats


def _k3(model, ref, trajs, pad_id):
    ids, attn = pad_batch([t.token_ids for t in trajs], pad_id)
    mask = action_mask([t.roles for t in trajs], ids.shape[1])
    with torch.no_grad():
        lp, _ = token_logprobs(model, ids, attn)
        rp, _ = token_logprobs(ref, ids, attn)
    log_r = (rp - lp) * mask
    return float(((torch.expm1(log_r) - log_r) * mask).sum() / mask.sum())


def test_kl_step_without_advantage_moves_toward_the_reference(tiny, parity_env):
    model0, tok = tiny
    recipe = load_recipe("smoke", ["rl.algorithm.kl.coef=1.0", "rl.minibatches=1", "rl.truncation=keep",
                                   "rl.lr=0.01", "env.max_new_tokens=6"])
    torch.manual_seed(0)
    model, ref = copy.deepcopy(model0), copy.deepcopy(model0)
    trajs = run_episodes(TorchEngine(model, tok), parity_env, parity_env.generate("train", 4, 0), ["g"] * 4,
                         budgets=LoopBudgets(1, 96, 6), sampling=SAMPLING,
                         policy_version=0, seed=0, generator=torch.Generator().manual_seed(0))
    stats = _update(model, ref, trajs, recipe, tok.pad_token_id)  # all rewards 0: zero advantage everywhere
    assert abs(stats["kl_k3"]) < 1e-6  # the policy is its own reference: no KL, and no gradient
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    before = _k3(model, ref, trajs, tok.pad_token_id)
    stats = _update(model, ref, trajs, recipe, tok.pad_token_id)
    after = _k3(model, ref, trajs, tok.pad_token_id)
    assert stats["kl_k3"] > 0 and abs(stats["kl_k3"] - before) < 1e-4  # the stat is the k3 of the batch
    assert after < before  # zero advantage: the only gradient is the KL's, toward the reference
    # with kl.coef 0 zero-advantage rows are skipped entirely: no optimizer step
    plain = load_recipe("smoke", ["rl.algorithm.kl.coef=0"]).rl.algorithm
    assert "updates" not in _update(model, None, trajs, recipe, tok.pad_token_id, algo=plain)
