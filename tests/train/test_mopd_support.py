"""MOPD's top-K support term: log-probs of K tokens per position, the forward KL worked by hand from a
Batch, the teacher role's top-K, and the recipe key reaching the update."""

import copy

import pytest
import torch

from tracerl.algorithms.batch import collate
from tracerl.algorithms.logprobs import chunked_support_logprobs
from tracerl.algorithms.spec import ALGORITHMS, PolicyOutput, StepContext
from tracerl.config import load_recipe
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.train.aux_roles import TeacherRole
from tracerl.train.roles import PolicyRole, Roles
from tracerl.train.update import rl_update

from tests_credit_helpers import episode

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
LN = torch.log


def test_support_logprobs_are_the_top_k_of_the_tempered_softmax_and_carry_its_gradient():
    torch.manual_seed(0)
    h = torch.randn(5, 6, requires_grad=True)
    head = torch.nn.Linear(6, 11, bias=False)
    full = torch.log_softmax(head(h) / 0.7, dim=-1)
    lp, ids = chunked_support_logprobs(h, 3, lm_head=head, chunk_size=2, temperature=0.7)
    assert torch.equal(ids, torch.topk(full, 3, dim=-1).indices)
    assert torch.allclose(lp, full.gather(-1, ids), atol=1e-6)
    # given ids: the same log-probs, and the same gradient as the plain full-vocabulary computation
    given = torch.tensor([[0, 4], [1, 1], [10, 2], [3, 5], [7, 9]])
    lp2, ids2 = chunked_support_logprobs(h, given, lm_head=head, chunk_size=2, temperature=0.7)
    assert torch.equal(ids2, given)
    g_chunked = torch.autograd.grad(lp2.sum(), h)[0]
    g_plain = torch.autograd.grad(full.gather(-1, given).sum(), h)[0]
    assert torch.allclose(g_chunked, g_plain, atol=1e-6)


def _one_row(student_lp_BT):
    """One trajectory, action tokens at columns 2 and 3, behaviour log-prob −1 on both."""
    batch = collate([episode("A", "g", ["s"], [[3, 5]], 1.0)], pad_id=0, truncation="keep")
    out = PolicyOutput(logprobs_BT=student_lp_BT, full_logprobs_BT=student_lp_BT, entropy_BT=None,
                       support_logprobs_BTK=LN(torch.tensor([[[1., 1.], [1., 1.], [.5, .25], [.25, .25]]])))
    teacher = {"teacher/t": torch.tensor([[0., 0., -1., -1.]]),
               "teacher/t@support_lp": LN(torch.tensor([[[1., 1.], [1., 1.], [.6, .2], [.5, .5]]])),
               "teacher/t@support_ids": torch.tensor([[[0, 0], [0, 0], [3, 7], [5, 9]]])}
    return batch, out, teacher


@pytest.mark.parametrize("ratio_col3, expected", [
    # teacher top-2 renormalised: column 2 (.75, .25) against the student's (.5, .25): .75·ln(.75/.5) = 0.3040988;
    # column 3 (.5, .5) against (.25, .25): ln 2 = 0.6931472; token mean 0.4986230
    (0.0, (0.3040988 + 0.6931472) / 2),
    # column 3's train/inference ratio e^1 > 2 leaves the band: only column 2 counts
    (1.0, 0.3040988),
])
def test_support_kl_worked_by_hand_from_a_batch(ratio_col3, expected):
    batch, out, scores = _one_row(torch.tensor([[0., 0., -1., -1. + ratio_col3]]))
    ctx = StepContext(max_tokens=8)
    with_k = ALGORITHMS["mopd"](support=2, support_coef=2.0)
    without = ALGORITHMS["mopd"]()
    adv, _ = with_k.advantages(batch, batch.reward_B, scores)
    loss_k, stats = with_k.loss(batch, out, scores, adv, batch.reward_B, ctx)
    loss_0, _ = without.loss(batch, out, {"teacher/t": scores["teacher/t"]}, adv, batch.reward_B, ctx)
    assert abs(float(stats["mopd_support_kl"]) - expected) < 1e-6
    assert abs(float(loss_k - loss_0) - 2.0 * expected) < 1e-6
    assert with_k.support_ids(scores).tolist() == scores["teacher/t@support_ids"].tolist()
    _, st = with_k.advantages(batch, batch.reward_B, scores)  # top-2 mass: (.8 + 1.0) / 2
    assert abs(st["mopd/support_mass/t"] - 0.9) < 1e-6


def _batch(model, tok, env, n=8, seed=0):
    trajs = run_episodes(TorchEngine(model, tok), env, env.generate("train", n, seed), [f"g{i // 4}" for i in range(n)],
                         budgets=LoopBudgets(1, 96, 6), sampling=SAMPLING, policy_version=0, seed=seed,
                         generator=torch.Generator().manual_seed(seed))
    return collate(trajs, pad_id=tok.pad_token_id, truncation="keep")


def test_teacher_role_scores_its_top_k_at_each_action_position(tiny, parity_env):
    model, tok = tiny
    batch = _batch(model, tok, parity_env)
    plain = TeacherRole("t", copy.deepcopy(model), temperature=1.0).scores(batch, {"teachers"})
    got = TeacherRole("t", copy.deepcopy(model), temperature=1.0, support=5).scores(batch, {"teachers"})
    assert set(plain) == {"teacher/t"} and set(got) == {"teacher/t", "teacher/t@support_lp", "teacher/t@support_ids"}
    assert torch.allclose(got["teacher/t"], plain["teacher/t"], atol=1e-6)
    with torch.no_grad():
        full = model(input_ids=batch.ids_BT, attention_mask=batch.attn_BT).logits[:, :-1].log_softmax(-1)
    sel = batch.action_BT[:, 1:] > 0
    top = torch.topk(full[sel], 5, dim=-1)
    assert torch.equal(got["teacher/t@support_ids"][:, 1:][sel], top.indices)
    assert torch.allclose(got["teacher/t@support_lp"][:, 1:][sel], top.values, atol=1e-5)
    assert not got["teacher/t@support_lp"][:, 1:][~sel].any()  # zero off the action positions


def _update(model, teacher, tok, env, algo):
    roles = Roles(PolicyRole(model, lr=0.01, max_grad_norm=1.0, sampling=SAMPLING),
                  aux={"teacher/t": TeacherRole("t", teacher, temperature=1.0, support=algo.teacher_support)})
    batch = _batch(model, tok, env)
    torch.manual_seed(0)
    stats, _ = rl_update(algo, roles, batch, batch.reward_B, minibatches=1, ctx=StepContext(max_tokens=96))
    return stats


def test_the_recipe_key_reaches_the_update(tiny, parity_env):
    model, tok = tiny
    teacher = copy.deepcopy(model)
    algo = lambda k: load_recipe("smoke", ["rl.algorithm.name=mopd", "rl.algorithm.kl.coef=0", f"rl.algorithm.support={k}",
                                          "roles.teachers=[{name: t, path: unused}]"]).rl.algorithm
    # a teacher identical to the student over the whole vocabulary: the term is exactly zero
    same = _update(copy.deepcopy(model), copy.deepcopy(model), tok, parity_env, algo(len(tok)))
    assert abs(same["mopd_support_kl"]) < 1e-5
    with torch.no_grad():
        for p in teacher.parameters():
            p.add_(0.1 * torch.randn_like(p))
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    s4 = _update(a, copy.deepcopy(teacher), tok, parity_env, algo(4))
    s0 = _update(b, copy.deepcopy(teacher), tok, parity_env, algo(0))
    assert s4["mopd_support_kl"] > 0 and "mopd_support_kl" not in s0
    assert any(not torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_support_coef_without_support_is_refused():
    with pytest.raises(Exception, match="support_coef"):
        ALGORITHMS["mopd"](support_coef=0.5)


def test_reverse_coef_scales_the_sampled_token_term_and_zero_leaves_the_forward_kl_alone():
    batch, out, scores = _one_row(torch.tensor([[0., 0., -1., -1.]]))
    scores = {**scores, "teacher/t": torch.tensor([[0., 0., -0.5, -2.0]])}  # teacher advantage (.5, −1)
    half, _ = ALGORITHMS["mopd"](reverse_coef=0.5).advantages(batch, batch.reward_B, scores)
    assert torch.allclose(half, torch.tensor([[0., 0., 0.25, -0.5]]))
    forward = ALGORITHMS["mopd"](reverse_coef=0.0, support=2)
    adv, stats = forward.advantages(batch, batch.reward_B, scores)
    assert not adv.any() and abs(stats["mopd/reverse_kl/t"] - 0.25) < 1e-6  # the KL is still logged: (−.5 + 1) / 2
    loss, s = forward.loss(batch, out, scores, adv, batch.reward_B, StepContext(max_tokens=8))
    assert abs(float(loss) - (0.3040988 + 0.6931472) / 2) < 1e-6 and float(s["pg_loss"]) == 0.0
    with pytest.raises(Exception, match="nothing to train"):
        ALGORITHMS["mopd"](reverse_coef=0.0)
