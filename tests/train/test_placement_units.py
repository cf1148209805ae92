"""Small pieces of the worker groups: the picklable model copy the learner ranks are built from (gradient
checkpointing's input-grad hook is a local function), the Ray bundle of a rank, where `auto` puts the learner,
and the device check script's syntax and CPU-checkable help."""

import pickle
import subprocess

import pytest

from tracerl.config import load_recipe


def test_portable_model_pickles_and_keeps_input_grads():
    from test_fsdp_learner import tiny_model
    from tracerl.train.fsdp_group import portable

    model = tiny_model()
    model.gradient_checkpointing_enable()
    model.enable_input_require_grads()
    with pytest.raises((AttributeError, pickle.PicklingError)):
        pickle.dumps(model)  # the hook is `enable_input_require_grads.<locals>.make_inputs_require_grads`
    out = portable(model)
    copy = pickle.loads(pickle.dumps(out["model"]))
    assert out["input_grads"] is True and model._require_grads_hook is not None  # the original keeps its hook
    copy.enable_input_require_grads()
    assert copy._require_grads_hook is not None


def test_ray_rank_bundle():
    from tracerl.config.placement import LearnerPlacement
    from tracerl.placement.ray_group import _spec_bundle

    assert _spec_bundle(LearnerPlacement()) == {"CPU": 1.0}
    spec = LearnerPlacement(where="ray", num_cpus=2, num_gpus=1, resources={"node_a": 1})
    assert _spec_bundle(spec) == {"CPU": 2.0, "node_a": 1.0, "GPU": 1.0}


@pytest.mark.parametrize("overrides, where", [
    ([], "inprocess"), (["learner.ranks=2"], "processes"), (["learner.ranks=2", "run.backend=ray", "ray.num_cpus=3"], "ray"),
    (["placement.learner.where=processes"], "processes"), (["run.backend=ray"], "inprocess"),
])
def test_auto_placement(overrides, where):
    from tracerl.config.placement import learner_where

    assert learner_where(load_recipe("smoke", overrides)) == where


def test_gpu_check_script_parses():
    assert subprocess.run(["bash", "-n", "benchmarks/gpu_check.sh"]).returncode == 0


MOPD = ["rl.algorithm.name=mopd", "roles.teachers=[{name: t, path: x}, {name: u, path: y}]"]


@pytest.mark.parametrize("overrides, words", [
    (["placement.reference.where=ray"], "needs run.backend: ray"),
    (["run.backend=ray", "placement.reference.where=ray", "model.lora.r=4"], "adapter disabled"),
    (["run.backend=ray", "placement.reference.where=ray", "rl.algorithm.kl.coef=0"], "does not use"),
    (["placement.reference.num_cpus=2"], "runs in the trainer"),
    (["run.backend=ray", "ray.num_cpus=1", "placement.reference.where=ray"], "raise ray.num_cpus to 2"),  # rollout + ref
    (["run.backend=ray", "ray.num_cpus=3", "placement.reference.where=ray", "placement.reference.num_gpus=1"],
     "reserves a GPU the CPU reference does not use"),
    (["placement.rollout.resources={node_b: 1}"], "run.backend is local"),
    # the other placeable roles (teachers, grader, critic, PRM) follow the reference's rules
    ([*MOPD, "placement.teachers.where=ray"], "placement.teachers.where: ray needs run.backend: ray"),
    (["run.backend=ray", "placement.critic.where=ray"], "places the critic, which rl.algorithm 'grpo' does not use"),
    (["run.backend=ray", "placement.grader.where=ray"], "none is set"),
    (["run.backend=ray", "placement.grader.where=ray", "roles.grader.url=http://h:1/v1", "roles.grader.model=m"],
     "endpoint that runs elsewhere already"),
    (["rl.algorithm.name=prime", "placement.prm.num_cpus=2"], "placement.prm.num_cpus sizes a Ray actor, and the prm runs"),
    ([*MOPD, "run.backend=ray", "ray.num_cpus=2", "placement.teachers.where=ray"], "raise ray.num_cpus to 3"),
    (["rl.algorithm.name=ppo", "run.backend=ray", "ray.num_cpus=3", "placement.critic.where=ray",
      "placement.critic.num_gpus=1"], "reserves a GPU the CPU critic does not use"),
    ([*MOPD, "run.backend=ray", "ray.num_cpus=4", "placement.teachers.where=ray", "placement.teachers.resources={b: 1}"],
     r"resources \['b'\] name custom Ray resources"),
])
def test_placement_refusals(overrides, words):
    from tracerl.errors import UserError

    with pytest.raises(UserError, match=words) as err:
        load_recipe("smoke", overrides)
    assert str(err.value).rstrip(".").count(". ") == 0  # one sentence


def test_ray_reference_loads():
    recipe = load_recipe("smoke", ["run.backend=ray", "ray.num_cpus=3", "placement.reference.where=ray"])
    assert recipe.placement.reference.where == "ray"
    recipe = load_recipe("smoke", [*MOPD, "run.backend=ray", "ray.num_cpus=3", "placement.teachers.where=ray"])
    assert recipe.placement.teachers.where == "ray"  # 1 rollout actor + 2 teacher actors: 3 CPUs


def test_resource_amounts_must_be_positive():
    from tracerl.errors import UserError

    with pytest.raises(UserError, match="positive amounts, got 'node_b'"):
        load_recipe("smoke", ["run.backend=ray", "placement.rollout.resources={node_b: 0}"])
