"""Minibatches keep a group's rows together (`rl.whole_groups`, train/update.py `minibatch_rows`).

A GRPO group's advantages sum to zero, so the tokens all its rows share get no net gradient when the
group is in one optimizer step; cut across two steps, each half pushes them by a random amount.
"""

import copy

import torch

from tracerl.algorithms.batch import collate
from tracerl.algorithms.spec import ALGORITHMS, StepContext
from tracerl.config import load_recipe
from tracerl.contract import TerminalReason, TokenRole, Trajectory
from tracerl.rollout import TorchEngine
from tracerl.store import Store
from tracerl.tasks import UniformSampler
from tracerl.train import update
from tracerl.train.roles import PolicyRole, Roles
from tracerl.run.rl_loop import train_rl
from tracerl.train.update import minibatch_rows, rl_update


def _traj(i: int, group: str, reward: float, last: int) -> Trajectory:
    t = Trajectory(trajectory_id=f"t{i}", group_id=group, task_id=group, env_name="e")
    t.append([1, 2], TokenRole.PROMPT)
    s, e = t.append([3, 4, last], TokenRole.ACTION, logprobs=[-1.0, -1.0, -1.0], policy_version=0)
    t.add_span("action", s, e)
    t.set_reward({"r": reward}, {"r": 1.0})
    t.finish(TerminalReason.EOS)
    return t


def _batch(sizes: list[int]):
    trajs, i = [], 0
    for g, n in enumerate(sizes):
        for j in range(n):
            trajs.append(_traj(i, f"g{g}", float(j % 2), 5 + j % 2))
            i += 1
    return collate(trajs, pad_id=0)


def _sizes(slices):
    return [int(s.numel()) for s in slices]


def test_cuts_fall_on_the_group_boundary_nearest_an_equal_share():
    batch = _batch([4, 4, 4, 4])
    keep = torch.arange(16)
    torch.manual_seed(0)
    assert _sizes(minibatch_rows(batch, keep, 2, whole_groups=True)) == [8, 8]
    # equal shares at 5.33 and 10.67 rows; group ends at 0, 4, 8, 12, 16 -> cuts at 4 and 12
    assert _sizes(minibatch_rows(batch, keep, 3, whole_groups=True)) == [4, 8, 4]
    # shares at 3.2, 6.4, 9.6, 12.8 -> cuts 4, 8, 8, 12: two cuts meet, so four minibatches, not five
    assert _sizes(minibatch_rows(batch, keep, 5, whole_groups=True)) == [4, 4, 4, 4]
    for seed in range(5):
        torch.manual_seed(seed)
        slices = minibatch_rows(batch, keep, 2, whole_groups=True)
        assert sorted(torch.cat(slices).tolist()) == list(range(16))
        groups = [set(batch.group_B[s].tolist()) for s in slices]
        assert groups[0].isdisjoint(groups[1])


def test_rows_mode_cuts_equal_shares_across_groups():
    batch = _batch([4, 4, 4, 4])
    straddled = 0
    for seed in range(5):
        torch.manual_seed(seed)
        slices = minibatch_rows(batch, torch.arange(16), 2, whole_groups=False)
        assert _sizes(slices) == [8, 8] and sorted(torch.cat(slices).tolist()) == list(range(16))
        groups = [set(batch.group_B[s].tolist()) for s in slices]
        straddled += bool(groups[0] & groups[1])
    assert straddled > 0


def test_each_optimizer_step_sees_advantages_that_sum_to_zero(tiny, monkeypatch):
    # two groups of 4 with rewards [0, 1, 0, 1]: GRPO advantages ±1 each; with whole groups every
    # minibatch of the two holds one group, so its advantages sum to 0 on every token
    model, _ = tiny
    batch = _batch([4, 4])
    algo = ALGORITHMS["grpo"]()
    seen = []
    loss = type(algo).loss

    def spy(self, mb, out, scores, adv_BT, rewards_B, ctx):
        seen.append((set(mb.group_B.tolist()), float(adv_BT[:, 2:].sum(dim=0).abs().max())))
        return loss(self, mb, out, scores, adv_BT, rewards_B, ctx)

    monkeypatch.setattr(type(algo), "loss", spy)
    for whole, seed in [(True, 0), (True, 1), (False, 0), (False, 1), (False, 2)]:
        torch.manual_seed(seed)
        roles = Roles(PolicyRole(copy.deepcopy(model), lr=0.01, max_grad_norm=1.0, sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0}))
        rl_update(algo, roles, batch, batch.reward_B, minibatches=2, ctx=StepContext(max_tokens=8), whole_groups=whole)
    whole_steps, row_steps = seen[:4], seen[4:]
    assert all(len(g) == 1 and s < 1e-6 for g, s in whole_steps)
    assert any(len(g) == 2 and s > 0.5 for g, s in row_steps)  # a straddled group leaves a net push


def test_the_recipe_key_reaches_the_update(tiny, parity_env, tmp_path, monkeypatch):
    model, tok = tiny
    asked = []
    real = update.minibatch_rows

    def spy(batch, keep, n, *, whole_groups=False):
        asked.append(whole_groups)
        return real(batch, keep, n, whole_groups=whole_groups)

    monkeypatch.setattr(update, "minibatch_rows", spy)
    for value in ("true", "false"):
        recipe = load_recipe("smoke", ["rl.steps=1", "rl.prompts_per_step=2", "rl.group_size=4", "rl.lr=0.01",
                                       "env.max_new_tokens=6", "rl.truncation=keep", "rl.checkpoint_every=0",
                                       "rl.algorithm.kl.coef=0", f"rl.whole_groups={value}"])
        torch.manual_seed(0)
        m = copy.deepcopy(model)
        with Store(tmp_path / f"{value}.sqlite") as store:
            train_rl(m, tok, TorchEngine(m, tok), UniformSampler(parity_env.generate("train", 16, 0), seed=3),
                     recipe, spec=parity_env, log=lambda *a: None, on_eval=None, on_checkpoint=lambda s, st: None,
                     store=store, tokenizer_hashes={}, progress=False)
        assert asked and asked[-1] is (value == "true")
