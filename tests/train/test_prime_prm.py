"""PRIME from a Batch: advantages and the PRM's cross-entropy worked by hand; the PRM fits the labels."""

import copy
import math

import torch

from tracerl.algorithms.batch import collate
from tracerl.algorithms.spec import ALGORITHMS, StepContext
from tracerl.config import load_recipe
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.train.aux_roles import build_aux_roles
from tracerl.train.checkpoint import freeze
from tracerl.train.roles import FrozenRole, PolicyRole, Roles
from tracerl.train.update import rl_update

from tests_credit_helpers import episode

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}


def _batch():
    # one group: A (R = 1) and B (R = 0), each one turn of two action tokens at positions 2, 3
    return collate([episode("A", "g", ["s"], [[3, 5]], 1.0), episode("B", "g", ["s"], [[3, 5]], 0.0)],
                   pad_id=0, truncation="keep")


def _scores():
    ref = torch.tensor([[0, 0, -1.0, -2.0], [0, 0, -1.0, -2.0]])
    prm = ref + torch.tensor([[0, 0, 0.4, 0.2], [0, 0, -0.2, 0.0]])
    return {"prm": prm, "reference": ref}


def test_prime_advantage_as_the_trainer_computes_it():
    batch = _batch()
    adv, stats = ALGORITHMS["prime"](beta=0.5).advantages(batch, batch.reward_B, _scores())
    # r_φ = 0.5·(log π_φ − log π_ref): A [0.2, 0.1] (mean 0.15), B [−0.1, 0] (mean −0.05)
    # process, leave-one-out: A − (−0.05) → [0.25, 0.15], suffix sums [0.4, 0.15]; B − 0.15 → [−0.4, −0.15]
    # outcome, leave-one-out: A 1 − 0 = 1, B 0 − 1 = −1  →  A [1.4, 1.15], B [−1.4, −1.15]
    assert torch.allclose(adv, torch.tensor([[0, 0, 1.4, 1.15], [0, 0, -1.4, -1.15]]), atol=1e-6)
    assert abs(stats["prime/implicit_reward_mean"] - 0.05) < 1e-6  # (0.2 + 0.1 − 0.1 + 0)/4


def test_prm_cross_entropy_on_the_outcome_labels():
    batch, s = _batch(), _scores()
    loss, st = ALGORITHMS["prime"](beta=0.5).role_loss("prm", batch, s["prm"], {"reference": s["reference"]},
                                                       batch.reward_B, StepContext(max_tokens=10))
    # logits: A 0.5·(0.4 + 0.2) = 0.3 (label 1), B 0.5·(−0.2) = −0.1 (label 0)
    # BCE: log(1 + e^−0.3) = 0.554355, log(1 + e^−0.1) = 0.644397 → mean 0.599376; both signs right
    want = (math.log1p(math.exp(-0.3)) + math.log1p(math.exp(-0.1))) / 2
    assert abs(float(loss) - want) < 1e-6 and abs(want - 0.599376) < 1e-6
    assert float(st["accuracy"]) == 1.0


def test_the_prm_is_trained_before_the_advantages_and_fits_the_labels(tiny, parity_env):
    model0, tok = tiny
    recipe = load_recipe("smoke", ["rl.algorithm.name=prime", "rl.algorithm.kl.coef=0", "rl.algorithm.beta=0.5", "roles.prm.lr=0.003",
                                   "rl.truncation=keep", "env.max_new_tokens=6"])
    torch.manual_seed(0)
    model = copy.deepcopy(model0)
    trajs = run_episodes(TorchEngine(model, tok), parity_env, parity_env.generate("train", 8, 0),
                         [f"g{i // 4}" for i in range(8)], budgets=LoopBudgets(1, 96, 6), sampling=SAMPLING,
                         policy_version=0, seed=0, generator=torch.Generator().manual_seed(0))
    batch = collate(trajs, pad_id=tok.pad_token_id, truncation="keep")
    assert 0 < float(batch.reward_B.sum()) < batch.size
    roles = Roles(PolicyRole(model, lr=1e-9, max_grad_norm=1.0, sampling=SAMPLING),
                  FrozenRole(freeze(copy.deepcopy(model0)), temperature=1.0), build_aux_roles(recipe, model, None))
    acc = []
    for step in range(6):
        stats, _ = rl_update(recipe.rl.algorithm, roles, batch, batch.reward_B, minibatches=1,
                             ctx=StepContext(max_tokens=96, step=step))
        acc.append(stats["prm/accuracy"])
    assert acc[0] == 0.5  # π_φ = π_ref at the start: every logit is 0, a tie
    assert acc[-1] == 1.0 and stats["prm/loss"] < math.log(2), (acc, stats["prm/loss"])
    assert stats["prime/implicit_reward_mean"] != 0.0  # the advantages saw the updated PRM
