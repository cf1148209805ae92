"""The sharded learner (`learner.ranks: 2`) runs what the single-process one runs, with its result: an
algorithm with auxiliary roles (PPO's critic, PRIME's PRM: replicated in the driver process, trained there),
losses normalised over the whole minibatch (NLL, MIS, Clip-Cov: every rank runs the whole minibatch), and a
LoRA policy (frozen base and trainable adapter in one FSDP2 unit) — weights within 2e-5 of one process."""

import copy

import pytest
import torch

from tracerl.algorithms.spec import ALGORITHMS, StepContext

from test_fsdp_learner import _batch, max_diff, run_controller, tiny_model

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
KW = dict(lr=3e-3, max_grad_norm=0.05, sampling=SAMPLING)


def _aux(model, algo) -> dict:
    from tracerl.train.aux_roles import CriticRole, PRMRole

    roles = {}
    if "critic" in algo.roles():
        roles["critic"] = CriticRole(copy.deepcopy(model), lr=1e-2, max_grad_norm=1.0, pretrain_steps=0)
    if "prm" in algo.roles():
        roles["prm"] = PRMRole(copy.deepcopy(model), lr=1e-2, max_grad_norm=1.0, temperature=1.0)
    return roles


def _compare(model, algo, *, steps: int = 2, generator: bool = False) -> dict:
    """Two `rl_update`s of `algo` on one process and on two ranks: the policy's (and trained aux roles')
    largest weight difference and how far the weights moved."""
    from tracerl.train.checkpoint import freeze
    from tracerl.train.fsdp_group import ShardedPolicyRole
    from tracerl.train.roles import FrozenRole, PolicyRole, Roles
    from tracerl.train.update import rl_update

    batch = _batch()
    ref = FrozenRole(freeze(copy.deepcopy(model)), temperature=1.0) if "reference" in algo.roles() else None
    single = Roles(PolicyRole(copy.deepcopy(model), **KW), ref, _aux(model, algo))
    sharded = Roles(ShardedPolicyRole(copy.deepcopy(model), **KW, ranks=2, threads=1), ref, _aux(model, algo))
    gens = [torch.Generator().manual_seed(5) if generator else None for _ in range(2)]
    res = {"diff": 0.0, "aux_diff": 0.0, "loss": []}
    for step in range(steps):
        stats = []
        for roles, gen in zip((single, sharded), gens):
            torch.manual_seed(step)
            s, _ = rl_update(algo, roles, batch, batch.reward_B, minibatches=2,
                             ctx=StepContext(max_tokens=64, step=step, generator=gen))
            roles.policy.scheduler.step()
            stats.append(s)
        assert stats[0]["updates"] == stats[1]["updates"] == 2.0
        res["loss"].append((stats[0]["loss"], stats[1]["loss"]))
        res["diff"] = max(res["diff"], max_diff(single.policy.model.state_dict(), sharded.policy.model.state_dict()))
        for name, role in single.aux.items():
            res["aux_diff"] = max(res["aux_diff"], max_diff(role.trained.module.state_dict(),
                                                            sharded.aux[name].trained.module.state_dict()))
    res["moved"] = max_diff(single.policy.model.state_dict(), model.state_dict())
    if generator:
        res["generator"] = torch.equal(gens[0].get_state(), gens[1].get_state())
    return res


def _algorithm_cases() -> dict:
    model = tiny_model()
    return {name: _compare(model, ALGORITHMS[algo](**kw), generator="clip_cov" in kw) for name, (algo, kw) in {
        "ppo": ("ppo", {"kl": {"coef": 0.0}}),
        "prime": ("prime", {"kl": {"coef": 0.0}}),
        "nll": ("grpo", {"nll": {"coef": 0.5}}),
        "mis": ("grpo", {"correction": {"kind": "mis", "low": 0.5, "high": 2.0}}),
        "clip_cov": ("grpo", {"clip_cov": {"ratio": 0.5, "cov_low": -10.0, "cov_high": 10.0}}),
    }.items()}


def test_which_losses_split_by_rows():
    assert ALGORITHMS["grpo"]().row_separable() and ALGORITHMS["ppo"]().row_separable()
    assert ALGORITHMS["grpo"](correction={"kind": "tis"}).row_separable()
    for kw in ({"nll": {"coef": 0.1}}, {"correction": {"kind": "mis"}}, {"kl_cov": {"k": 0.2}},
               {"clip_cov": {"ratio": 0.2}}):
        assert not ALGORITHMS["grpo"](**kw).row_separable(), kw
    assert not ALGORITHMS["mopd"]().row_separable()  # its own loss: a mean over the tokens its ratio band keeps


@pytest.mark.timeout(600)  # ~25 s of wall time on an idle 2-core machine
def test_aux_roles_and_whole_minibatch_losses_on_two_ranks_equal_one():
    res = run_controller(_algorithm_cases)
    for name, r in res.items():
        assert r["moved"] > 1e-3 and r["diff"] < 2e-5, (name, r)
        assert r["aux_diff"] < 2e-5, (name, r)  # the critic / PRM: trained in the driver on both sides
        for a, b in r["loss"]:
            assert b == pytest.approx(a, rel=1e-4, abs=1e-6), (name, r)
    assert res["clip_cov"]["generator"]  # rank 0 drew Clip-Cov's tokens from the step's own generator


def _lora_case() -> dict:
    from tracerl.models import lora
    from tracerl.config.model import LoraSettings
    from tracerl.train.fsdp_group import ShardedPolicyRole
    from tracerl.train.roles import PolicyRole, Roles
    from tracerl.train.update import rl_update

    pointer = {"path": "base", "gguf_file": None, "dtype": "float32", "relative": True}
    model = lora.attach_lora(tiny_model(), LoraSettings(r=4, alpha=8.0), pointer=pointer)
    with torch.no_grad():  # peft starts B at 0, which leaves A without a gradient on the first step
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05, generator=torch.Generator().manual_seed(len(n)))
    algo = ALGORITHMS["grpo"](kl={"coef": 0.1})
    single = Roles(PolicyRole(copy.deepcopy(model), **KW))
    sharded = Roles(ShardedPolicyRole(copy.deepcopy(model), **KW, ranks=2, threads=1))
    from tracerl.train.roles import FrozenRole

    batch, res = _batch(), {"diff": 0.0, "loss": []}
    for roles in (single, sharded):  # the KL reference: the policy itself with its adapter off (no copy)
        roles.reference = FrozenRole(lora.AdapterDisabled(roles.policy.model), temperature=1.0)
    for step in range(2):
        out = []
        for roles in (single, sharded):
            torch.manual_seed(step)
            s, _ = rl_update(algo, roles, batch, batch.reward_B, minibatches=2, ctx=StepContext(max_tokens=64, step=step))
            roles.policy.scheduler.step()
            out.append(s["loss"])
        res["loss"].append(tuple(out))
        res["diff"] = max(res["diff"], max_diff(single.policy.model.state_dict(), sharded.policy.model.state_dict()))
    w0, w1 = model.state_dict(), single.policy.model.state_dict()
    res["moved"] = max(float((w1[k] - w0[k]).abs().max()) for k in w0 if "lora_" in k)
    res["base_moved"] = max(float((w1[k] - w0[k]).abs().max()) for k in w0 if "lora_" not in k)
    res["base_moved_sharded"] = max(float((sharded.policy.model.state_dict()[k] - w0[k]).abs().max())
                                    for k in w0 if "lora_" not in k)
    res["optimizer"] = (len(single.policy.state_dict()["optimizer"]["state"]),
                        len(sharded.policy.state_dict()["optimizer"]["state"]))
    return res


@pytest.mark.slow  # LoRA on 2 ranks stays in the default suite through test_combinations' lora-2 rows
@pytest.mark.timeout(600)  # ~15 s of wall time on an idle 2-core machine
def test_lora_policy_on_two_ranks_equals_one():
    pytest.importorskip("peft")
    r = run_controller(_lora_case)
    assert r["moved"] > 1e-3 and r["diff"] < 2e-5, r
    assert r["base_moved"] == r["base_moved_sharded"] == 0.0  # the frozen base weights stay bit-identical
    assert r["optimizer"][0] == r["optimizer"][1] > 0  # AdamW state for the adapter only, in one format
    for a, b in r["loss"]:
        assert b == pytest.approx(a, rel=1e-4, abs=1e-6)
