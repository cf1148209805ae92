"""PRIME from a Batch: advantages and the PRM's cross-entropy worked by hand; the PRM fits the labels."""

import copy
import math

import torch

from tracerl.algorithms.batch import collate
from tracerl.algorithms.spec import ALGORITHMS, StepContext
from tracerl.algorithms.spec.prime import mixed_groups, prm_ranking
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
    rows = {k[4:]: v for k, v in st.items() if k.startswith("row/")}
    assert torch.allclose(rows["logit"], torch.tensor([0.3, -0.1])) and rows["label"].tolist() == [1.0, 0.0]
    summary = ALGORITHMS["prime"]().role_summary("prm", rows)
    assert summary["accuracy"] == 1.0 and summary["auc"] == 1.0 and summary["group_auc"] == 1.0


def test_prm_balanced_cross_entropy_on_mixed_groups_by_hand():
    # group g: A (R = 1), B, C (R = 0); group h: D, E (R = 0) — no correct rollout, so the PRM skips it
    batch = collate([episode("A", "g", ["s"], [[3, 5]], 1.0), episode("B", "g", ["s"], [[3, 5]], 0.0),
                     episode("C", "g", ["s"], [[3, 5]], 0.0), episode("D", "h", ["s"], [[3, 5]], 0.0),
                     episode("E", "h", ["s"], [[3, 5]], 0.0)], pad_id=0, truncation="keep")
    prime = ALGORITHMS["prime"](beta=0.5)
    assert prime.role_rows("prm", batch, batch.reward_B).tolist() == [True, True, True, False, False]
    assert ALGORITHMS["prime"](prm_groups="all").role_rows("prm", batch, batch.reward_B) is None
    mb = batch.rows([0, 1, 2])
    ref = torch.tensor([[0, 0, -1.0, -2.0]] * 3)
    prm = ref + torch.tensor([[0, 0, 0.4, 0.2], [0, 0, -0.2, 0.0], [0, 0, 0.6, 0.4]])
    # logits 0.5·Σ: A 0.3 (label 1), B −0.1, C 0.5 (label 0); BCE A log(1+e^−0.3) = 0.554355,
    # B log(1+e^−0.1) = 0.644397, C log(1+e^0.5) = 0.974077; balanced: (0.554355 + (0.644397 + 0.974077)/2)/2
    bce = [math.log1p(math.exp(-0.3)), math.log1p(math.exp(-0.1)), math.log1p(math.exp(0.5))]
    loss, _ = prime.role_loss("prm", mb, prm, {"reference": ref}, mb.reward_B, StepContext(max_tokens=10))
    assert abs(float(loss) - (bce[0] + (bce[1] + bce[2]) / 2) / 2) < 1e-6 and abs(float(loss) - 0.681796) < 1e-6
    plain, _ = ALGORITHMS["prime"](beta=0.5, prm_balance=False).role_loss("prm", mb, prm, {"reference": ref}, mb.reward_B,
                                                                           StepContext(max_tokens=10))
    assert abs(float(plain) - sum(bce) / 3) < 1e-6
    # a group whose only correct rollout is an infrastructure failure is not mixed
    label, group = torch.tensor([True, False, True, False]), torch.tensor([0, 0, 1, 1])
    assert mixed_groups(label, group, torch.tensor([True, True, False, True])).tolist() == [True, True, False, False]


def test_prm_ranking_by_hand():
    # logits, labels, groups: rows 0..4
    s = prm_ranking(torch.tensor([0.3, -0.1, -0.5, 0.2, -0.5]), torch.tensor([1.0, 0, 0, 0, 1]),
                    torch.tensor([0, 0, 0, 1, 1]))
    # signs right for rows 0, 1, 2 → accuracy 3/5; positives: 1 of 2 right, negatives: 2 of 3 → (1/2 + 2/3)/2
    assert abs(s["accuracy"] - 0.6) < 1e-7 and abs(s["positive_frac"] - 0.4) < 1e-7
    assert abs(s["balanced_accuracy"] - 7 / 12) < 1e-7
    # pairs (pos, neg): (0,1) (0,2) (0,3) won; (4,1) lost; (4,2) tie at −0.5 → ½; (4,3) lost → 3.5/6
    # within a group: (0,1) (0,2) won, (4,3) lost → 2/3
    assert abs(s["auc"] - 3.5 / 6) < 1e-12 and abs(s["group_auc"] - 2 / 3) < 1e-12


def test_prm_ranking_is_chance_where_accuracy_is_not():
    # few positives and a uniform drift of the logit: accuracy swings with the drift, the ranking does not
    label = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0])
    group = torch.zeros(8, dtype=torch.long)
    down, up = prm_ranking(-torch.ones(8), label, group), prm_ranking(torch.ones(8), label, group)
    assert down["accuracy"] == 7 / 8 and up["accuracy"] == 1 / 8  # "all wrong" looks good, "all right" bad
    rounding = torch.tensor([3e-7, -2e-7, 1e-7, 0, -4e-7, 2e-7, 5e-7, -1e-7])  # π_φ = π_ref on other padding
    for s in (down, up, prm_ranking(torch.zeros(8), label, group), prm_ranking(rounding, label, group)):
        assert s["balanced_accuracy"] == 0.5 and s["auc"] == 0.5 and s["group_auc"] == 0.5
    ranked = prm_ranking(torch.tensor([0.5, 0.1, 0.2, 0.3, 0.1, 0.2, 0.3, 0.4]), label, group)
    assert ranked["accuracy"] == 1 / 8 and ranked["balanced_accuracy"] == 0.5 and ranked["auc"] == 1.0
    one_class = prm_ranking(torch.tensor([0.2, -0.1]), torch.zeros(2), torch.zeros(2, dtype=torch.long))
    assert one_class == {"accuracy": 0.5, "positive_frac": 0.0}  # no pairs: the class metrics are not logged


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
    acc, auc = [], []
    for step in range(6):
        stats, _ = rl_update(recipe.rl.algorithm, roles, batch, batch.reward_B, minibatches=1,
                             ctx=StepContext(max_tokens=96, step=step))
        acc.append(stats["prm/accuracy"])
        auc.append(stats["prm/auc"])
    assert acc[0] == 0.5 and auc[0] == 0.5  # π_φ = π_ref at the start: every logit is 0, a tie
    assert acc[-1] == 1.0 and auc[-1] == 1.0 and stats["prm/loss"] < math.log(2), (acc, auc, stats["prm/loss"])
    assert stats["prm/balanced_accuracy"] == 1.0
    assert stats["prime/implicit_reward_mean"] != 0.0  # the advantages saw the updated PRM
