"""`rl.lr_schedule`: the policy's learning rate at every step, worked by hand, from the recipe to the optimizer."""

import copy
import math

import pytest

from tracerl.config import load_recipe
from tracerl.errors import UserError


def _lrs(recipe, model, tok, steps: int) -> list[float]:
    from tracerl.envs import get_env
    from tracerl.train.learner import build_learner
    from tracerl.run.rl_loop import RLState

    ln = build_learner(recipe, recipe.rl.algorithm, copy.deepcopy(model), tok, spec=get_env(recipe.env.name),
                       state=RLState(), reference=copy.deepcopy(model), stage_index=0)
    opt, sched, out = ln.roles.policy.optimizer, ln.roles.policy.scheduler, []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()  # no gradients: the weights stay, the schedule moves as in training
        sched.step()
    return out


def test_cosine_decays_to_the_floor_at_the_last_step(tiny):
    model, tok = tiny
    recipe = load_recipe("smoke", ["rl.steps=10", "rl.lr=0.001", "rl.lr_schedule=cosine", "rl.min_lr_ratio=0.2"])
    lrs = _lrs(recipe, model, tok, 10)
    # warm-up 1/3, 2/3, 1 of the peak; then 0.2 + 0.8 * (1 + cos(pi * k / 7)) / 2 at steps 3 + k, k = 0..6:
    # the floor itself would come at the step after the last
    want = [1e-3 / 3, 2e-3 / 3] + [1e-3 * (0.2 + 0.4 * (1 + math.cos(math.pi * k / 7))) for k in range(7)]
    assert lrs[:2] + lrs[3:] == pytest.approx(want, rel=1e-9) and lrs[2] == pytest.approx(1e-3)
    assert all(b < a for a, b in zip(lrs[3:], lrs[4:])) and 0.2e-3 < lrs[-1] < 0.25e-3


def test_constant_is_the_default_and_holds_the_peak(tiny):
    model, tok = tiny
    recipe = load_recipe("smoke", ["rl.steps=10", "rl.lr=0.001"])
    assert recipe.rl.lr_schedule == "constant"
    assert _lrs(recipe, model, tok, 8) == pytest.approx([1e-3 / 3, 2e-3 / 3] + [1e-3] * 6, rel=1e-9)


@pytest.mark.parametrize("override,words", [
    (["rl.min_lr_ratio=0.05"], "rl.min_lr_ratio applies only with rl.lr_schedule: cosine"),
    (["rl.lr_schedule=cosine", "rl.steps=4", "rl.stages=[{name: a, steps: 2}, {name: b, steps: 2, reset_optimizer: true}]"],
     "restart it"),
    (["rl.lr_schedule=linear"], "lr_schedule"),
])
def test_settings_that_would_do_nothing_are_refused(override, words):
    with pytest.raises(UserError, match=words):
        load_recipe("smoke", override)
