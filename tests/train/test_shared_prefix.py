"""The learner runs each distinct prompt once (train/shared_prefix.py) and gets the plain forward's numbers."""

import copy

import pytest
import torch

from tracerl.algorithms.batch import Batch
from tracerl.models.precision import enable_gradient_checkpointing
from tracerl.train import shared_prefix
from tracerl.train.roles import score_actions


def make_batch(rows: list[tuple[list[int], list[int]]], pad: int = 0) -> Batch:
    """rows of (token ids, roles: 1 ACTION / 0 otherwise), right-padded."""
    B, T = len(rows), max(len(r[0]) for r in rows)
    ids = torch.full((B, T), pad, dtype=torch.long)
    attn, action = torch.zeros((B, T), dtype=torch.long), torch.zeros((B, T))
    for i, (t, a) in enumerate(rows):
        ids[i, :len(t)], attn[i, :len(t)], action[i, :len(a)] = torch.tensor(t), 1, torch.tensor(a, dtype=torch.float)
    zeros = torch.zeros(B)
    return Batch(ids_BT=ids, attn_BT=attn, action_BT=action, weight_B=torch.ones(B), behavior_BT=torch.zeros((B, T)),
                 version_BT=torch.zeros((B, T), dtype=torch.long), group_B=torch.arange(B), baseline_B=torch.ones(B, dtype=torch.bool),
                 reward_B=zeros, truncated_B=zeros.bool(), length_B=attn.sum(1), turn_BT=torch.zeros((B, T), dtype=torch.long),
                 state_BS=torch.zeros((B, 1), dtype=torch.long), failed_BS=torch.zeros((B, 1), dtype=torch.bool), trajectory_ids=[str(i) for i in range(B)])


def grouped_batch(vocab: int, seed: int = 0, system: int = 0) -> Batch:
    """Two prompts (20 and 26 tokens, the first `system` of them common to both) x 3 samples; multi-turn
    rows: action, observation, action, ragged."""
    g = torch.Generator().manual_seed(seed)
    rand = lambda n: torch.randint(5, vocab, (n,), generator=g).tolist()  # noqa: E731
    rows, common = [], rand(system)
    for plen in (20, 26):
        prompt = common + rand(plen - system)
        for k in range(3):
            a1, obs, a2 = rand(4 + k), rand(5), rand(2 + 2 * k)
            rows.append((prompt + a1 + obs + a2, [0] * plen + [1] * len(a1) + [0] * len(obs) + [1] * len(a2)))
    return make_batch(rows)


def test_split_column_is_one_before_the_earliest_action():
    # first ACTION at 5 and 3 -> the hidden state at 2 predicts the earliest one: split at 2
    b = make_batch([([1] * 8, [0, 0, 0, 0, 0, 1, 1, 1]), ([1] * 6, [0, 0, 0, 1, 1, 1])])
    assert shared_prefix.split_column(b.ids_BT, b.attn_BT, b.action_BT) == 2
    # a row without ACTION tokens bounds the split by its length only
    b = make_batch([([1] * 12, [0] * 10 + [1, 1]), ([1] * 9, [0] * 9)])
    assert shared_prefix.split_column(b.ids_BT, b.attn_BT, b.action_BT) == 9
    # a left-padded row: nothing before its first real token may be shared
    b.attn_BT[1] = torch.tensor([0, 0] + [1] * 10)
    assert shared_prefix.split_column(b.ids_BT, b.attn_BT, b.action_BT) == 0


def _tokens_shape(kw) -> torch.Size:
    return (kw["input_ids"] if kw.get("input_ids") is not None else kw["inputs_embeds"]).shape[:2]


@pytest.mark.parametrize("one_lookup", [False, True])
@pytest.mark.parametrize("train", [True, False])
def test_shared_prefix_scores_and_gradients_equal_the_plain_forward(tiny, train, one_lookup, monkeypatch):
    model, tok = tiny
    model = copy.deepcopy(model)
    batch = grouped_batch(len(tok))
    if one_lookup:  # the rows embedded once, each decoder call taking its slice (a large vocabulary's path)
        monkeypatch.setattr(shared_prefix, "ONE_LOOKUP_MIN", 0)
    calls, lookups = [], []
    hook = model.get_decoder().register_forward_pre_hook(lambda m, a, kw: calls.append(_tokens_shape(kw)), with_kwargs=True)
    looked = model.get_input_embeddings().register_forward_hook(lambda m, a, out: lookups.append(out.shape[:2]))
    model.train(train)
    outs, grads = [], []
    for share in (False, True):
        model.zero_grad(set_to_none=True)
        out = score_actions(model, batch, temperature=0.7, share_prefix=share)
        (-(out.logprobs_BT * batch.action_BT).sum() - out.entropy_BT.sum()).backward()
        outs.append(out)
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    hook.remove()
    looked.remove()
    # plain: one call over 6 x 40 tokens; shared: the 2 prompts' first 19 tokens, then 6 rows from column 19
    T = batch.ids_BT.shape[1]
    assert calls == [torch.Size([6, T]), torch.Size([2, 19]), torch.Size([6, T - 19])]
    assert lookups == [torch.Size([6, T])] * 2 if one_lookup else lookups == calls  # one lookup a scoring, or one a call
    for name in ("logprobs_BT", "full_logprobs_BT", "entropy_BT"):
        torch.testing.assert_close(getattr(outs[1], name), getattr(outs[0], name), rtol=1e-5, atol=1e-5)
    assert (outs[1].logprobs_BT[batch.action_BT == 0] == 0).all()
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 10
    for n in grads[0]:
        torch.testing.assert_close(grads[1][n], grads[0][n], rtol=1e-4, atol=1e-5)


def test_split_levels_common_prefix_then_prompts():
    b = grouped_batch(100, system=10)
    assert shared_prefix.split_levels(b.ids_BT, b.attn_BT, b.action_BT) == [10, 19]
    # the prompts differ after 14 of their 19 shared columns: too little to share a second level
    assert shared_prefix.split_levels(*_fields(grouped_batch(100, system=14))) == [14]
    assert shared_prefix.split_levels(*_fields(grouped_batch(100, system=0))) == [19]
    # SFT: every row a different demonstration after a common system prompt
    rows = [([1] * 12 + [k, 2, 3, 4, 5, 6, 7, 8, 9], [0] * 14 + [1] * 7) for k in range(10, 14)]
    assert shared_prefix.split_levels(*_fields(make_batch(rows))) == [12]


def _fields(b: Batch):
    return b.ids_BT, b.attn_BT, b.action_BT


def test_two_levels_score_like_the_plain_forward_and_sft_loss_is_the_token_mean_nll(tiny):
    from tracerl.train.sft import sft_loss

    model, tok = tiny
    model = copy.deepcopy(model).train()
    batch = grouped_batch(len(tok), system=10)
    calls = []
    hook = model.get_decoder().register_forward_pre_hook(lambda m, a, kw: calls.append(_tokens_shape(kw)), with_kwargs=True)
    shared = score_actions(model, batch, temperature=1.0)
    hook.remove()
    T = batch.ids_BT.shape[1]
    assert calls == [torch.Size([1, 10]), torch.Size([2, 9]), torch.Size([6, T - 19])]
    plain = score_actions(model, batch, temperature=1.0, share_prefix=False)
    torch.testing.assert_close(shared.logprobs_BT, plain.logprobs_BT, rtol=1e-5, atol=1e-5)
    # the SFT loss: mean over ACTION targets of -log softmax(logits)[target], from the full logits
    logits = model(input_ids=batch.ids_BT, attention_mask=batch.attn_BT).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.ids_BT[:, 1:], reduction="none")
    m = batch.action_BT[:, 1:]
    torch.testing.assert_close(sft_loss(model, batch.ids_BT, batch.attn_BT, batch.action_BT), (nll * m).sum() / m.sum(),
                               rtol=1e-5, atol=1e-6)


def test_no_shared_prompt_or_gradient_checkpointing_runs_the_plain_forward(tiny):
    model, tok = tiny
    model = copy.deepcopy(model)
    dec = model.get_decoder()
    distinct = make_batch([(list(range(5, 25)) + [7, 8], [0] * 20 + [1, 1]), (list(range(6, 26)) + [7], [0] * 20 + [1])])
    assert shared_prefix.shared_prefix_hidden(dec, distinct.ids_BT, distinct.attn_BT, distinct.action_BT) is None
    batch = grouped_batch(len(tok))
    assert shared_prefix.shared_prefix_hidden(dec, batch.ids_BT, batch.attn_BT, batch.action_BT) is not None
    enable_gradient_checkpointing(model)
    model.train()
    assert shared_prefix.shared_prefix_hidden(dec, batch.ids_BT, batch.attn_BT, batch.action_BT) is None
    # the prompt is shorter than MIN_PREFIX: not worth a second call
    short = make_batch([([5, 6, 7, 8, 9], [0, 0, 0, 1, 1]), ([5, 6, 7, 8, 10], [0, 0, 0, 1, 1])])
    assert shared_prefix.shared_prefix_hidden(dec, short.ids_BT, short.attn_BT, short.action_BT) is None


@pytest.mark.parametrize("share", [True, False])
def test_learner_share_prefix_reaches_the_policy_role(tiny, share):
    from tracerl.config import load_recipe
    from tracerl.envs import get_env
    from tracerl.train.learner import build_learner
    from tracerl.run.rl_loop import RLState

    model, tok = tiny
    model = copy.deepcopy(model)
    recipe = load_recipe("smoke", [f"learner.share_prefix={str(share).lower()}"])
    ln = build_learner(recipe, recipe.rl.algorithm, model, tok, spec=get_env(recipe.env.name), state=RLState(),
                       reference=copy.deepcopy(model), stage_index=0)
    calls = []
    hook = model.get_decoder().register_forward_pre_hook(lambda m, a, kw: calls.append(1), with_kwargs=True)
    ln.roles.policy.score(grouped_batch(len(tok)))
    hook.remove()
    assert len(calls) == (2 if share else 1)
