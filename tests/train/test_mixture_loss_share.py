"""`mixture.loss_share: episodes`: each environment's share of the policy loss is its share of the
episodes, not of the action tokens — the factors worked by hand, the loss they give, and the load checks."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch

from tracerl.algorithms.batch import Batch
from tracerl.algorithms.losses import policy_loss
from tracerl.config import load_recipe
from tracerl.errors import UserError
from tracerl.run.multienv import EnvRouter

MINI = str(Path(__file__).with_name("multi_env_mini.yaml"))


def _batch(lengths: list[int], weights: list[float]) -> Batch:
    T = max(lengths)
    action = torch.tensor([[1.0] * n + [0.0] * (T - n) for n in lengths])
    B = len(lengths)
    long = torch.zeros(B, T, dtype=torch.long)
    return Batch(ids_BT=long + 1, attn_BT=long + 1, action_BT=action, weight_B=torch.tensor(weights),
                 behavior_BT=torch.zeros(B, T), version_BT=long, group_B=torch.arange(B),
                 baseline_B=torch.ones(B, dtype=torch.bool), reward_B=torch.zeros(B),
                 truncated_B=torch.zeros(B, dtype=torch.bool), length_B=torch.tensor(lengths), turn_BT=long,
                 state_BS=torch.zeros(B, 1, dtype=torch.long), failed_BS=torch.zeros(B, 1, dtype=torch.bool), trajectory_ids=[str(i) for i in range(B)])


def _router(share: str) -> EnvRouter:
    routes = [types.SimpleNamespace(name=n, share=1.0, spec=None, budgets=None) for n in ("math", "code")]
    return EnvRouter(routes, ["math", "code"], {}, loss_share=share)


def test_episode_shares_worked_by_hand():
    # math: two episodes of 2 action tokens; code: two of 6 tokens and one infra failure (weight 0)
    trajs = [types.SimpleNamespace(env_name=e) for e in ("math", "math", "code", "code", "code")]
    batch = _batch([2, 2, 6, 6, 6], [1, 1, 1, 1, 0])
    stats = _router("episodes").share_loss(batch, trajs)
    # 16 weighted tokens over 4 trained episodes: math (2/4) / (4/16) = 2, code (2/4) / (12/16) = 2/3
    assert stats == {"domain/math/loss_weight": pytest.approx(2.0), "domain/code/loss_weight": pytest.approx(2 / 3)}
    assert batch.weight_B.tolist() == pytest.approx([2.0, 2.0, 2 / 3, 2 / 3, 0.0])
    m = batch.mask_BT
    assert float(m[:2].sum()) == pytest.approx(8.0) and float(m[2:].sum()) == pytest.approx(8.0)  # equal halves
    # the token-mean surrogate with advantage +1 on math and 0 on code, on-policy (ratio 1):
    # tokens: −4/16 = −0.25; episodes: −(2·4)/(8 + 8) = −0.5, math's half of the loss
    adv = torch.tensor([[1.0] * 6] * 2 + [[0.0] * 6] * 3)
    plain = _batch([2, 2, 6, 6, 6], [1, 1, 1, 1, 0])
    lp = torch.zeros(5, 6)
    loss_tokens, _ = policy_loss(lp, lp, adv, plain.mask_BT, aggregation="token", clip_low=0.2, clip_high=0.28)
    loss_episodes, _ = policy_loss(lp, lp, adv, batch.mask_BT, aggregation="token", clip_low=0.2, clip_high=0.28)
    assert float(loss_tokens) == pytest.approx(-0.25) and float(loss_episodes) == pytest.approx(-0.5)


def test_tokens_leaves_the_weights_alone():
    trajs = [types.SimpleNamespace(env_name=e) for e in ("math", "code")]
    batch = _batch([2, 6], [1, 1])
    assert _router("tokens").share_loss(batch, trajs) == {} and batch.weight_B.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("overrides, words", [
    (["rl.algorithm.aggregation=sequence"], "aggregation sequence already weighs every episode the same"),
    (["rl.algorithm={name: mopd}", "roles.teachers=[{name: t, path: unused}]"], "mopd's loss counts the tokens it keeps"),
])
def test_episodes_where_it_would_do_nothing_is_refused(overrides, words):
    with pytest.raises(UserError) as err:
        load_recipe(MINI, ["mixture.loss_share=episodes", *overrides])
    assert words in str(err.value) and "\n" not in str(err.value)
    assert load_recipe(MINI, ["mixture.loss_share=episodes"]).mixture.loss_share == "episodes"
