"""Every user-facing registry entry is reachable from a recipe: one trainer step with it calls it.

The step runs the real loop (`train_rl`: rollouts, selection, Batch, the Algorithm, optimizer
steps) on the parity env; a profiler records which Python functions ran, and the entry's own code
must be among them. Registering an algorithm without wiring it into a spec fails here.
"""

import sys

import pytest
import torch

from tracerl.algorithms import registry
from tracerl.config import load_recipe
from tracerl.rollout import TorchEngine
from tracerl.store import Store
from tracerl.tasks import UniformSampler
from tracerl.train.checkpoint import freeze
from tracerl.run.rl_loop import train_rl

TRAINER_KINDS = ("advantage", "loss", "kl", "correction", "reward", "selection", "controller")

# registry name -> overrides of rl.algorithm that make the trainer call it
REACH = {
    "grpo": [], "dr_grpo": ["name=dr_grpo"], "rloo": ["name=rloo"], "reinforce_pp": ["name=reinforce_pp"],
    "reinforce_pp_baseline": ["name=reinforce_pp_baseline"],
    "policy_loss": [], "gspo_loss": ["name=gspo"], "clip_cov": ["clip_cov={ratio: 0.2, cov_low: -10, cov_high: 10}"],
    "kl_cov": ["kl_cov={k: 0.2}"], "decoupled_ppo": ["decoupled={}"], "kl_loss": ["kl.coef=0.1"],
    "entropy_bonus": ["entropy.coef=0.01"], "positive_nll": ["nll={coef: 0.1}"],
    "k1": ["kl.coef=0.1", "kl.estimator=k1"], "k2": ["kl.coef=0.1", "kl.estimator=k2"],
    "k3": ["kl.coef=0.1", "kl.estimator=k3"],
    "tis": ["correction={kind: tis}"], "mis": ["correction={kind: mis}"],
    "overlong_penalty": ["overlong={cache_len: 8}"], "length_bonus": ["length_control={only_correct: false}"],
    "dynamic_sampling": ["dynamic_sampling=true"], "resample_on_correct": ["roc={oversample: 2}"],
    "magic_entropy": ["entropy.magic={target: 10.0}"],
}
# learned credit: step groups, a critic, a process reward model, teachers (roles: train/aux_roles.py)
REACH |= {"gigpo": ["name=gigpo"], "gae": ["name=ppo"], "gae_decoupled": ["name=ppo"], "value_loss": ["name=ppo"],
          "vapo_gae": ["name=ppo", "alpha=0.05"], "prime": ["name=prime"], "mopd": ["name=mopd"],
          "mopd_loss": ["name=mopd"]}
PENDING: set[str] = set()


def _entries():
    return [e for e in registry.entries() if e.kind in TRAINER_KINDS]


def _code(fn):
    return (fn.__init__ if isinstance(fn, type) else fn).__code__


def one_step(tiny, parity_env, tmp_path, algorithm_overrides):
    model, tok = tiny
    overrides = ["rl.steps=1", "rl.prompts_per_step=2", "rl.group_size=4", "rl.minibatches=2", "rl.lr=0.01",
                 "env.max_new_tokens=6", "rl.truncation=keep", "rl.checkpoint_every=0"]
    if "name=mopd" in algorithm_overrides:  # a teacher: the starting model itself, saved as a checkpoint
        model.save_pretrained(tmp_path / "teacher")
        tok.save_pretrained(tmp_path / "teacher")
        overrides = overrides + [f"roles.teachers=[{{name: t, path: {tmp_path / 'teacher'}}}]"]
    recipe = load_recipe("smoke", overrides + ["rl.algorithm.kl.coef=0"] + [f"rl.algorithm.{o}" for o in algorithm_overrides])
    torch.manual_seed(0)
    import copy

    model = copy.deepcopy(model)
    reference = freeze(copy.deepcopy(model)) if "reference" in recipe.rl.algorithm.roles() else None
    logged = []
    with Store(tmp_path / "s.sqlite") as store:
        train_rl(model, tok, TorchEngine(model, tok), UniformSampler(parity_env.generate("train", 16, 0), seed=3),
                 recipe, spec=parity_env, log=lambda m, s: logged.append(m), on_eval=None,
                 on_checkpoint=lambda s, st: None, store=store, tokenizer_hashes={}, progress=False,
                 reference=reference)
    return logged[-1]


def test_every_trainer_kind_entry_has_a_route():
    names = {e.name for e in _entries()}
    assert names == set(REACH) | PENDING, "a registry entry without a recipe route (or a stale route)"


@pytest.mark.parametrize("name", sorted(set(REACH) | PENDING))
def test_one_trainer_step_calls_the_entry(name, tiny, parity_env, tmp_path):
    if name in PENDING:
        pytest.xfail(f"{name} needs a learned-credit role (critic, PRM, teacher) or step groups")
    target = _code(registry.get(name))
    called = set()

    def prof(frame, event, arg):
        if event == "call":
            called.add(frame.f_code)

    sys.setprofile(prof)
    try:
        metrics = one_step(tiny, parity_env, tmp_path, REACH[name])
    finally:
        sys.setprofile(None)
    assert target in called, f"{name} was not called by a trainer step with {REACH[name]}"
    assert metrics.get("policy/updates", 0) >= 1 or name == "dynamic_sampling", "no optimizer step was taken"
    if name in ("clip_cov", "kl_cov"):  # a fifth of the tokens is selected: floor(0.2 N) / N > 0
        assert 0.1 < metrics["policy/cov_affected_frac"] <= 0.2
