"""The FSDP2 learner (`learner.ranks: 2`, gloo on CPU): one and two `rl_update`s with the policy sharded
over two ranks give the single-process update's weights, optimizer state and loss, under token, sequence
and fixed aggregation with gradient clipping active, on rows whose shared prompts are split
(`train/shared_prefix.py`); the loss normalisation that makes this so, by hand; every algorithm and mode
loads with two ranks, only a GPU placement is refused. Aux roles, whole-minibatch losses and LoRA:
tests/train/test_sharded_roles.py."""

import copy
import multiprocessing

import pytest
import torch

from tracerl.algorithms.spec import ALGORITHMS, StepContext
from tracerl.config import load_recipe
from tracerl.train.minibatch import minibatch_scale


def test_sharded_normalisation_by_hand():
    # per-token losses: row A has 3 tokens of loss 1, row B one token of loss 5; rank 0 holds A, rank 1 B.
    # token mean over the batch (3 + 5) / 4 = 2; a mean of the ranks' means (1 + 5) / 2 = 3 would be wrong.
    # each rank: its mean × minibatch_scale(its rows, batch counts): 1 · 3/4 + 5 · 1/4 = 2.
    # sequence: mean of per-response means (1 + 5) / 2 = 3; each rank 1 · 1/2 + 5 · 1/2 = 3.
    from tracerl.algorithms.losses.aggregate import aggregate

    loss = torch.tensor([[1.0, 1.0, 1.0], [5.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    for agg, want in (("token", 2.0), ("sequence", 3.0)):
        assert float(aggregate(loss, mask, agg)) == want
        ranks = [float(aggregate(loss[i:i + 1], mask[i:i + 1], agg)) * minibatch_scale(agg, mask[i:i + 1], 4.0, 2.0, 1)
                 for i in range(2)]
        assert ranks == ([0.75, 1.25] if agg == "token" else [0.5, 2.5]) and sum(ranks) == want
    assert (float(aggregate(loss[:1], mask[:1])) + float(aggregate(loss[1:], mask[1:]))) / 2 == 3.0  # not 2


SYSTEM = 8  # tokens every row starts with; then a 9-token prompt shared by the 5 rows of its group


def _batch():
    """10 rows in 2 groups of 5: each row's prompt is the common 8-token prefix and its group's 9 tokens
    (`train/shared_prefix.py` splits such rows at both levels), then an action of 2..11 tokens (token and
    sequence means differ)."""
    from tracerl.algorithms.batch import collate
    from tracerl.contract import TerminalReason, TokenRole, Trajectory

    g = torch.Generator().manual_seed(1)
    system = torch.randint(2, 64, (SYSTEM,), generator=g).tolist()
    prompts = [system + torch.randint(2, 64, (9,), generator=g).tolist() for _ in range(2)]
    trajs = []
    for i in range(10):
        t = Trajectory(trajectory_id=f"t{i}", group_id=f"g{i // 5}", task_id="x", env_name="e")
        t.append(prompts[i // 5], TokenRole.PROMPT)
        n = 2 + (i * 7) % 10
        s, e = t.append(torch.randint(2, 64, (n,), generator=g).tolist(), TokenRole.ACTION,
                        logprobs=(-4.16 + 0.3 * torch.randn(n, generator=g)).tolist(), policy_version=0)
        t.add_span("action", s, e)
        t.set_reward({"r": float(i % 3 == 0)}, {"r": 1.0})
        t.finish(TerminalReason.EOS)
        trajs.append(t)
    return collate(trajs, pad_id=0)


def tiny_model():
    from tracerl.models.tiny import build_model

    return build_model(64, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_positions=64,
                       seed=0, pad_token_id=0, eos_token_id=1)


def run_controller(target, *args, timeout: float = 540):
    """Run `target(*args)` as rank 0 in a spawned process (it starts the learner group's other rank) and
    return what it answers; a traceback string fails the test."""
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_guarded, args=(q, target, *args))
    p.start()
    try:
        res = q.get(timeout=timeout)
        p.join(timeout=60)
    finally:
        if p.is_alive():
            p.kill()
    assert not isinstance(res, str), res
    return res


def _guarded(out, target, *args) -> None:
    try:
        torch.set_num_threads(1)
        res = target(*args)
        from tracerl.train.fsdp_group import learner_group

        learner_group(2, 1).close()
        out.put(res)
    except BaseException as e:  # noqa: BLE001 - reported to the test
        import traceback

        out.put(traceback.format_exc() + repr(e))


def max_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _grpo_cases():
    """Rank 0: the single-process update beside the 2-rank sharded one, both through `rl_update`."""
    from tracerl.train.fsdp_group import ShardedPolicyRole
    from tracerl.train.roles import FrozenRole, PolicyRole, Roles
    from tracerl.train.shared_prefix import split_levels
    from tracerl.train.update import rl_update

    model, batch = tiny_model(), _batch()
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
    kw = dict(lr=3e-3, max_grad_norm=0.05, sampling=sampling)
    res = {"levels": split_levels(batch.ids_BT[[0, 1, 7]], batch.attn_BT[[0, 1, 7]], batch.action_BT[[0, 1, 7]])}
    for agg, kl in (("token", 0.0), ("sequence", 0.1), ("fixed", 0.0)):
        algo = ALGORITHMS["grpo"](aggregation=agg, kl={"coef": kl})
        ref = FrozenRole(copy.deepcopy(model), temperature=1.0) if kl else None
        # "fixed" also runs a cosine schedule over 6 steps (rl.lr_schedule), read back from both sides below
        sched = {"schedule": {"kind": "cosine", "steps": 6, "min_ratio": 0.1}} if agg == "fixed" else {}
        single = Roles(PolicyRole(copy.deepcopy(model), **kw, **sched), ref)
        sharded = Roles(ShardedPolicyRole(copy.deepcopy(model), **kw, **sched, ranks=2, threads=1), ref)
        for step in range(2):
            ctx = StepContext(max_tokens=64, step=step)
            torch.manual_seed(step)
            s1, a1 = rl_update(algo, single, batch, batch.reward_B, minibatches=2, ctx=ctx)
            single.policy.scheduler.step()
            torch.manual_seed(step)
            s2, a2 = rl_update(algo, sharded, batch, batch.reward_B, minibatches=2, ctx=ctx)
            sharded.policy.scheduler.step()
            w1, w2 = single.policy.model.state_dict(), sharded.policy.model.state_dict()
            res[agg, step] = {
                "diff": max_diff(w1, w2), "moved": max_diff(w1, model.state_dict()),
                "adv": float((a1 - a2).abs().max()), "loss": (s1["loss"], s2["loss"]),
                "grad_norm": (s1["grad_norm"], s2["grad_norm"]), "updates": (s1["updates"], s2["updates"])}
        o1, o2 = single.policy.state_dict(), sharded.policy.state_dict()
        res[agg, "optim"] = max(float((o1["optimizer"]["state"][i][n] - o2["optimizer"]["state"][i][n]).abs().max())
                                for i in o1["optimizer"]["state"] for n in ("exp_avg", "exp_avg_sq"))
        res[agg, "sched"] = (o1["scheduler"]["last_epoch"], o2["scheduler"]["last_epoch"])
        if sched:
            for _ in range(3):
                single.policy.scheduler.step()
                sharded.policy.scheduler.step()
            res["cosine_lr"] = (single.policy.state_dict()["scheduler"]["_last_lr"][0],
                                sharded.policy.state_dict()["scheduler"]["_last_lr"][0])
        if agg == "token":  # resume: the single-process checkpoint state, restored on 2 ranks, takes the same 3rd step
            resumed = Roles(ShardedPolicyRole(copy.deepcopy(single.policy.model), **kw, state=o1, ranks=2, threads=1))
            ctx = StepContext(max_tokens=64, step=2)
            torch.manual_seed(2)
            rl_update(algo, single, batch, batch.reward_B, minibatches=2, ctx=ctx)
            torch.manual_seed(2)
            rl_update(algo, resumed, batch, batch.reward_B, minibatches=2, ctx=ctx)
            res["resumed"] = max_diff(single.policy.model.state_dict(), resumed.policy.model.state_dict())
    return res


@pytest.mark.timeout(600)  # ~20 s of wall time on an idle 2-core machine; generous for a loaded one
def test_two_rank_fsdp_update_equals_single_process():
    res = run_controller(_grpo_cases)
    assert res["levels"] == [SYSTEM, SYSTEM + 8]  # the rows' shared prefixes are split (at the default share_prefix)
    for agg in ("token", "sequence", "fixed"):
        for step in range(2):
            r = res[agg, step]
            assert r["updates"] == (2.0, 2.0) and r["adv"] == 0.0
            assert r["grad_norm"][0] > 0.05  # the clip is active on every step, and the same on both sides
            assert r["grad_norm"][1] == pytest.approx(r["grad_norm"][0], rel=1e-4)
            assert r["loss"][1] == pytest.approx(r["loss"][0], rel=1e-4, abs=1e-6)
            assert r["moved"] > 1e-3 and r["diff"] < 2e-5, (agg, step, r)  # weights moved ≫ their difference
        assert res[agg, "optim"] < 1e-6 and res[agg, "sched"] == (2, 2)
    assert res["resumed"] < 2e-5
    # after 5 schedule steps: 3e-3 * (0.1 + 0.9 * (1 + cos(pi * 2 / 3)) / 2) = 3e-3 * 0.325, on both sides
    assert res["cosine_lr"] == pytest.approx((3e-3 * 0.325, 3e-3 * 0.325), rel=1e-9)


def test_learner_ranks_selects_the_sharded_policy_and_one_update():
    from tracerl.train.fsdp_group import ShardedPolicyRole
    from tracerl.train.learner import Learner, _policy_role
    from tracerl.train.roles import PolicyRole
    from tracerl.train.update import rl_update

    assert _policy_role(load_recipe("smoke")) is PolicyRole
    role = _policy_role(load_recipe("smoke", ["learner.ranks=2", "run.threads=1"]))
    assert role.func is ShardedPolicyRole and role.keywords == {"ranks": 2, "threads": 1}
    assert Learner.update is rl_update  # one RL step, whatever the placement


@pytest.mark.parametrize("override", [
    ["rl.mode=async"], ["rl.algorithm.name=ppo"], ["rl.algorithm.name=prime"],
    ["rl.algorithm.name=mopd", "roles.teachers=[{name: t, path: unused}]"],
    ["rl.algorithm.nll.coef=0.1"], ["rl.algorithm.correction.kind=mis"],
    ["rl.algorithm.clip_cov={ratio: 0.2}"], ["rl.algorithm.kl_cov={k: 0.2}"],
])
def test_what_was_refused_now_loads_with_two_ranks(override):
    assert load_recipe("smoke", ["learner.ranks=2", *override]).learner.ranks == 2


def test_gpu_ranks_need_a_gpu_each():
    # NCCL runs one rank per GPU: local processes need learner.ranks GPUs, Ray ranks reserve one each
    from tracerl.config import LoraSettings
    from tracerl.config.combinations import combination_problem
    from tracerl.config.placement import check_placement

    recipe = load_recipe("smoke", ["learner.ranks=2", "model.device=cpu"])
    assert combination_problem(recipe) is None and check_placement(recipe) is None
    recipe.model.device = "cuda:0"  # the section's own checks only; the placement is judged below
    if not torch.cuda.is_available():
        assert "local NCCL ranks need a GPU each and this machine has 0" in check_placement(recipe)
    recipe.run.backend, recipe.ray.num_cpus = "ray", 3  # auto: Ray actors, which must reserve a GPU each
    assert "need a GPU each" in check_placement(recipe)
    recipe.placement.learner.num_gpus = 1
    assert check_placement(recipe) is None
    recipe.model.device, recipe.model.lora = "cpu", LoraSettings(r=8)
    assert "reserves GPUs the CPU learner does not use" in check_placement(recipe)
    recipe.placement.learner.num_gpus = 0
    assert combination_problem(recipe) is None and check_placement(recipe) is None
