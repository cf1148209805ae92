"""MOPD from a Batch: the teacher advantage worked by hand; distilling lowers the reverse KL to the teacher."""

import copy

import torch

from tracerl.algorithms.batch import collate
from tracerl.algorithms.spec import ALGORITHMS, StepContext
from tracerl.config import load_recipe
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.train.aux_roles import TeacherRole
from tracerl.train.roles import PolicyRole, Roles
from tracerl.train.update import rl_update

from tests_credit_helpers import episode

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}


def test_teacher_advantage_mixed_with_the_outcome_advantage():
    # A (R = 1) and B (R = 0) in one group, behaviour log-prob −1 on each of their two action tokens
    batch = collate([episode("A", "g", ["s"], [[3, 5]], 1.0), episode("B", "g", ["s"], [[3, 5]], 0.0)],
                    pad_id=0, truncation="keep")
    t1 = torch.tensor([[0, 0, -0.5, -1.5], [0, 0, -1.0, -3.0]])
    t2 = torch.tensor([[0, 0, -1.5, -0.5], [0, 0, -1.0, -1.0]])
    algo = ALGORITHMS["mopd"](outcome_coef=0.5)
    adv, stats = algo.advantages(batch, batch.reward_B, {"teacher/a": t1, "teacher/b": t2})
    # teacher advantage = mean over teachers of (log π_T − (−1)): A [(0.5 − 0.5)/2, (−0.5 + 0.5)/2] = [0, 0]
    # B [(0 + 0)/2, (−2 + 0)/2] = [0, −1];  GRPO outcome ±1 (std 0.5), times 0.5 → A +0.5, B −0.5
    assert torch.allclose(adv, torch.tensor([[0, 0, 0.5, 0.5], [0, 0, -0.5, -1.5]]), atol=1e-5)
    # reverse-KL samples, mean of −1 − log π_T over the four tokens: a (−0.5 + 0.5 + 0 + 2)/4 = 0.5, b (0.5 − 0.5 + 0 + 0)/4 = 0
    assert abs(stats["mopd/reverse_kl/a"] - 0.5) < 1e-6 and abs(stats["mopd/reverse_kl/b"]) < 1e-6


def _exact_reverse_kl(student, teacher, batch):
    """Σ_v p_s (log p_s − log p_t), averaged over the positions predicting an action token."""
    sel = batch.action_BT[:, 1:] > 0
    with torch.no_grad():
        ls = student(input_ids=batch.ids_BT, attention_mask=batch.attn_BT).logits[:, :-1][sel].log_softmax(-1)
        lt = teacher(input_ids=batch.ids_BT, attention_mask=batch.attn_BT).logits[:, :-1][sel].log_softmax(-1)
    return float((ls.exp() * (ls - lt)).sum(-1).mean())


def test_distilling_lowers_the_reverse_kl_to_the_teacher(tiny, parity_env):
    model0, tok = tiny
    torch.manual_seed(0)
    student, teacher = copy.deepcopy(model0), copy.deepcopy(model0)
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(0.1 * torch.randn_like(p))
    algo = load_recipe("smoke", ["rl.algorithm.name=mopd", "rl.algorithm.kl.coef=0", "roles.teachers=[{name: t, path: unused}]"]).rl.algorithm
    roles = Roles(PolicyRole(student, lr=0.01, max_grad_norm=1.0, sampling=SAMPLING),
                  aux={"teacher/t": TeacherRole("t", teacher, temperature=1.0)})
    tasks = parity_env.generate("train", 32, 0)
    probe = None
    kls = []
    for step in range(10):
        trajs = run_episodes(TorchEngine(student, tok), parity_env, tasks, [f"g{i // 4}" for i in range(32)],
                             budgets=LoopBudgets(1, 96, 6), sampling=SAMPLING, policy_version=step, seed=step,
                             generator=torch.Generator().manual_seed(step))
        batch = collate(trajs, pad_id=tok.pad_token_id, truncation="keep")
        probe = probe or batch
        kls.append(_exact_reverse_kl(student, teacher, probe))
        stats, _ = rl_update(algo, roles, batch, batch.reward_B, minibatches=1, ctx=StepContext(max_tokens=96, step=step))
        assert stats["updates"] == 1.0 and stats["mopd/reverse_kl/t"] > 0
    assert kls[-1] < 0.9 * kls[0], kls  # measured: 0.179 → 0.146 over the 10 updates
