"""A resumed RL stage draws the same next batch and takes the same steps, bit for bit."""

import copy
import dataclasses

import pytest
import torch

from tracerl.config import load_recipe
from tracerl.rollout import TorchEngine
from tracerl.store import Store
from tracerl.tasks import UniformSampler
from tracerl.train.rl import RLState, train_rl


def _train(model, tok, recipe, store, spec, state=None, stop_at=None):
    snaps = {}

    def on_ckpt(step, st):
        snaps[step] = (copy.deepcopy(st), torch.get_rng_state(), copy.deepcopy(model.state_dict()))

    r = recipe if stop_at is None else recipe.model_copy(update={"rl": recipe.rl.model_copy(update={"steps": stop_at})})
    sampler = UniformSampler(spec.generate("train", 16, 0), seed=3)
    if state is not None:  # the pipeline rebuilds the stage's sampler and loads its saved state
        sampler.load_state_dict(state.sampler_state)
    engine = TorchEngine(model, tok)
    train_rl(model, tok, engine, sampler, r, spec=spec, log=lambda m, s: None, on_eval=None, on_checkpoint=on_ckpt,
             store=store, tokenizer_hashes={}, progress=False, state=state)
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
