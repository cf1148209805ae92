"""Sequence packing and token-budget micro-batches (train/packing.py): the padded batch's numbers."""

import copy

import pytest
import torch

from tracerl.algorithms.spec import ALGORITHMS, StepContext
from tracerl.config import load_recipe
from tracerl.train.minibatch import policy_steps
from tracerl.train.packing import micro_batches, pack_bins, packed_inputs
from tracerl.train.roles import score_actions
from tests.train.test_shared_prefix import make_batch


def test_pack_bins_first_fit_decreasing_and_micro_batches():
    # lengths 7, 3, 5, 2, 4 into bins of 7: 7 | 5+2 | 4+3
    assert pack_bins([7, 3, 5, 2, 4], 7) == [[0], [2, 3], [4, 1]]
    # budget 10, packed (Σ lengths): 7+3 = 10 | 5+2 = 7 (+4 = 11 > 10) | 4
    assert micro_batches([7, 3, 5, 2, 4], 10, packed=True) == [[0, 1], [2, 3], [4]]
    # padded (rows × longest): 7 | 3 (·1) then 3,5 → 2·5 = 10, +2 → 3·5 = 15 > 10 | 2,4 → 2·4 = 8
    assert micro_batches([7, 3, 5, 2, 4], 10, packed=False) == [[0], [1, 2], [3, 4]]
    assert micro_batches([12, 3], 10, packed=True) == [[0], [1]]  # a row over budget runs alone
    assert micro_batches([7, 3], None, packed=True) == [[0, 1]]


def test_packed_inputs_reset_positions_and_confine_attention():
    b = make_batch([([5, 6, 7], [0, 1, 1]), ([8, 9], [0, 1]), ([4], [0])])
    ids, pos, allowed, where = packed_inputs(b)
    # width 3: bin 0 = row 0; bin 1 = row 1 then row 2
    assert ids.tolist() == [[5, 6, 7], [8, 9, 4]] and pos.tolist() == [[0, 1, 2], [0, 1, 0]]
    assert where.tolist() == [[0, 1, 2], [3, 4, -1], [5, -1, -1]]
    # bin 1: rows 1 (columns 0-1) and 2 (column 2) never see each other; causal inside each
    assert allowed[1, 0].int().tolist() == [[1, 0, 0], [1, 1, 0], [0, 0, 1]]


def mixed_batch(vocab: int, seed: int = 0):
    """One 43-token row and five of 8-16 tokens (multi-turn: action, observation, action): they pack
    into bins of 43 several to a bin."""
    g = torch.Generator().manual_seed(seed)
    rand = lambda n: torch.randint(5, vocab, (n,), generator=g).tolist()  # noqa: E731
    rows = []
    for plen, a1, obs, a2 in ((20, 10, 5, 8), (4, 2, 0, 2), (5, 3, 2, 3), (6, 4, 3, 3), (3, 2, 1, 2), (7, 4, 2, 3)):
        rows.append((rand(plen + a1 + obs + a2), [0] * plen + [1] * a1 + [0] * obs + [1] * a2))
    return make_batch(rows)


def test_packed_scores_and_gradients_equal_the_padded_batch(tiny):
    model, tok = tiny
    model = copy.deepcopy(model)
    batch = mixed_batch(len(tok))
    assert len(pack_bins(batch.length_B.tolist(), 43)) == 3  # FFD: 43 | 16+16+8 | 13+8: rows share bins
    w = torch.randn(batch.ids_BT.shape, generator=torch.Generator().manual_seed(1))
    grads = []
    for packing in (False, True):
        model.zero_grad()
        out = score_actions(model, batch, temperature=0.9, share_prefix=False, packing=packing)
        ((out.logprobs_BT * w).sum() + out.entropy_BT.sum()).backward()
        grads.append((out, {n: p.grad.clone() for n, p in model.named_parameters()}))
    (a, ga), (b, gb) = grads
    assert torch.allclose(a.logprobs_BT, b.logprobs_BT, atol=1e-5) and torch.allclose(a.entropy_BT, b.entropy_BT, atol=1e-5)
    assert (b.logprobs_BT[batch.action_BT == 0] == 0).all()  # observation, prompt, padding: nothing scored
    for n in ga:
        assert torch.allclose(ga[n], gb[n], atol=1e-5), n


class _GradOnly:
    """A policy whose `step` keeps the gradient instead of stepping (the equivalence is of the gradient)."""

    def __init__(self, model, packing):
        self.model, self.packing, self.grads = model, packing, []

    module = property(lambda self: self.model)

    def score(self, mb, support=None):
        return score_actions(self.model, mb, temperature=1.0, share_prefix=False, packing=self.packing)

    def step(self, loss):
        self.model.zero_grad(set_to_none=True)
        loss() if callable(loss) else loss.backward()
        self.grads.append({n: p.grad.clone() for n, p in self.model.named_parameters()})
        return 0.0


@pytest.mark.parametrize("aggregation", ["token", "sequence"])
@pytest.mark.parametrize("packing", [False, True])
def test_micro_batch_accumulation_equals_the_full_batch_gradient(tiny, aggregation, packing):
    model, tok = tiny
    model = copy.deepcopy(model)
    model.eval()  # no dropout either way; policy_steps sets train mode, the tiny model has none
    batch = mixed_batch(len(tok))
    g = torch.Generator().manual_seed(2)
    batch.behavior_BT = torch.where(batch.action_BT > 0, -torch.rand(batch.ids_BT.shape, generator=g) * 3, torch.nan)
    adv = torch.tensor([1.0, -0.5, 0.3, -1.2, 0.8, 0.4])[:, None] * batch.mask_BT
    algo = ALGORITHMS["grpo"](aggregation=aggregation, clip_low=0.5, clip_high=0.5)
    rows = [torch.arange(6)]
    full, micro = _GradOnly(model, False), _GradOnly(model, packing)
    kw = dict(minibatches=1, ctx=StepContext(max_tokens=64))
    s_full = policy_steps(algo, full, batch, batch.reward_B, {}, adv, rows, **kw)
    # lengths 43, 8, 13, 16, 8, 16, budget 40: packed [43] | [8, 13, 16] (37) | [8, 16]: 3 backward passes;
    # padded [43] | [8, 13] (2·13) | [16, 8] (2·16) | [16]: 4; one optimizer step either way
    s_micro = policy_steps(algo, micro, batch, batch.reward_B, {}, adv, rows, **kw, micro_tokens=40, packed=packing)
    assert len(micro.grads) == 1 and s_micro["updates"] == 1.0
    assert s_micro["loss"] == pytest.approx(s_full["loss"], abs=1e-6)
    for n, gfull in full.grads[0].items():
        assert torch.allclose(micro.grads[0][n], gfull, atol=1e-6), n


def test_packing_settings_are_refused_where_they_cannot_apply():
    with pytest.raises(Exception, match="share_prefix"):
        load_recipe("smoke", ["learner.packing=true"])
    with pytest.raises(Exception, match="sum over rows"):
        load_recipe("smoke", ["learner.max_tokens_per_micro_batch=256", "rl.algorithm.nll={coef: 0.1}"])
    r = load_recipe("smoke", ["learner.packing=true", "learner.share_prefix=false",
                              "learner.max_tokens_per_micro_batch=256"])
    assert r.learner.packing and r.learner.max_tokens_per_micro_batch == 256
