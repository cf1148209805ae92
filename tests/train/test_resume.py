"""A resumed RL stage draws the same next batch and takes the same steps, bit for bit."""

import copy
import dataclasses

import pytest
import torch

from tracerl.config import load_recipe
from tracerl.rollout import TorchEngine
from tracerl.store import Store
from tracerl.tasks import UniformSampler
from tracerl.run.rl_loop import RLState, train_rl


def _train(model, tok, recipe, store, spec, state=None, stop_at=None, reference=None):
    snaps = {}

    def on_ckpt(step, st):
        snaps[step] = (copy.deepcopy(st), torch.get_rng_state(), copy.deepcopy(model.state_dict()))

    r = recipe if stop_at is None else recipe.model_copy(update={"rl": recipe.rl.model_copy(update={"steps": stop_at})})
    sampler = UniformSampler(spec.generate("train", 16, 0), seed=3)
    if state is not None:  # the pipeline rebuilds the stage's sampler and loads its saved state
        sampler.load_state_dict(state.sampler_state)
    engine = TorchEngine(model, tok)
    train_rl(model, tok, engine, sampler, r, spec=spec, log=lambda m, s: None, on_eval=None, on_checkpoint=on_ckpt,
             store=store, tokenizer_hashes={}, progress=False, state=state, reference=reference)
    return snaps


@pytest.mark.parametrize("sampler", ["uniform", "dynamic"])
def test_resume_is_bit_exact(tiny, tmp_path, sampler, parity_env):
    model0, tok = tiny
    recipe = load_recipe("smoke", ["rl.steps=4", "rl.checkpoint_every=2", "rl.prompts_per_step=2", "rl.algorithm.kl.coef=0",
                                   "rl.group_size=4", "rl.minibatches=2", "env.max_new_tokens=6", "rl.lr=0.01",
                                   f"tasks.sampler.kind={sampler}"])
    torch.manual_seed(0)
    straight = copy.deepcopy(model0)
    with Store(tmp_path / "a.sqlite") as a:
        _train(straight, tok, recipe, a, parity_env)
        ids_a = [t.token_ids for t in a.trajectories(stage="rl")]
        filtered_a = [t.token_ids for t in a.trajectories(stage="rl_filtered")]


    torch.manual_seed(0)
    first = copy.deepcopy(model0)
    with Store(tmp_path / "b.sqlite") as b:
        snaps = _train(first, tok, recipe, b, parity_env, stop_at=2)
        state, rng, weights = snaps[2]
        resumed = copy.deepcopy(model0)
        resumed.load_state_dict(weights)
        torch.set_rng_state(rng)
        _train(resumed, tok, recipe, b, parity_env, state=RLState(**dataclasses.asdict(state)))
        ids_b = [t.token_ids for t in b.trajectories(stage="rl")]
        filtered_b = [t.token_ids for t in b.trajectories(stage="rl_filtered")]

    assert ids_a == ids_b  # the same batches were drawn and sampled after the resume
    assert filtered_a == filtered_b
    if sampler == "dynamic":
        assert filtered_a, "dynamic sampling should have dropped some zero-variance groups here"
    changed = any(not torch.equal(p, q) for p, q in zip(model0.state_dict().values(), straight.state_dict().values()))
    assert changed, "the test needs real updates to mean anything"
    for (name, p), q in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(p, q), name


def _tensors(x):
    """Every tensor of a nested state (weights, AdamW moments), in a fixed order."""
    if torch.is_tensor(x):
        return [x]
    if isinstance(x, dict):
        return [t for k in sorted(x, key=str) for t in _tensors(x[k])]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []


PLACED = ["run.backend=ray", "ray.num_cpus=2", "run.threads=1"]  # the role on its Ray actor (`placement.<role>`)


@pytest.mark.parametrize("algo,role", [(["rl.algorithm.name=ppo", "roles.critic.pretrain_steps=1",
                                         "roles.critic.lr=0.01"], "critic"),
                                       (["rl.algorithm.name=prime", "roles.prm.lr=0.01"], "prm"),
                                       pytest.param(["rl.algorithm.name=ppo", "roles.critic.pretrain_steps=1",
                                                     "roles.critic.lr=0.01", *PLACED, "placement.critic.where=ray"],
                                                    "critic", marks=pytest.mark.slow),  # 13-17 s each here
                                       pytest.param(["rl.algorithm.name=prime", "roles.prm.lr=0.01", *PLACED,
                                                     "placement.prm.where=ray"], "prm", marks=pytest.mark.slow)],
                         ids=["critic", "prm", "critic-on-ray", "prm-on-ray"])
def test_resume_is_bit_exact_with_a_trained_role(tiny, tmp_path, parity_env, algo, role, request):
    from tracerl.train.checkpoint import freeze

    if "run.backend=ray" in algo:  # its state saved from and loaded into the actor (placement/remote_trained.py)
        request.getfixturevalue("ray_local")
        request.getfixturevalue("role_actors")
    model0, tok = tiny
    recipe = load_recipe("smoke", ["rl.steps=4", "rl.checkpoint_every=2", "rl.prompts_per_step=2", "rl.group_size=4",
                                   "rl.minibatches=2", "env.max_new_tokens=6", "rl.lr=0.01", *algo])
    reference = freeze(copy.deepcopy(model0))
    torch.manual_seed(0)
    straight = copy.deepcopy(model0)
    with Store(tmp_path / "a.sqlite") as a:
        end_a = _train(straight, tok, recipe, a, parity_env, reference=reference)[4][0]
        ids_a = [t.token_ids for t in a.trajectories(stage="rl")]
    torch.manual_seed(0)
    first = copy.deepcopy(model0)
    with Store(tmp_path / "b.sqlite") as b:
        state, rng, weights = _train(first, tok, recipe, b, parity_env, stop_at=2, reference=reference)[2]
        assert role in state.roles_state and "weights" in state.roles_state[role]  # the role's model is in the state
        resumed = copy.deepcopy(model0)
        resumed.load_state_dict(weights)
        torch.set_rng_state(rng)
        end_b = _train(resumed, tok, recipe, b, parity_env, state=RLState(**dataclasses.asdict(state)),
                       reference=reference)[4][0]
        ids_b = [t.token_ids for t in b.trajectories(stage="rl")]
    assert ids_a == ids_b
    start = _tensors(state.roles_state[role]["weights"])
    role_a, role_b = _tensors(end_a.roles_state[role]), _tensors(end_b.roles_state[role])
    assert any(not torch.equal(p, q) for p, q in zip(start, _tensors(end_a.roles_state[role]["weights"])))
    assert len(role_a) == len(role_b) and all(torch.equal(p, q) for p, q in zip(role_a, role_b))  # weights and AdamW
    for (name, p), q in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(p, q), name
