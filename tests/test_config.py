"""Recipes validate before anything runs, and errors name the key and the closest valid one."""

import pytest

from tracerl.config import Recipe, load_recipe, recipe_names
from tracerl.errors import UserError


def test_shipped_recipes_validate():
    assert {"default", "smoke"} <= set(recipe_names())
    for name in recipe_names():
        assert isinstance(load_recipe(name), Recipe)


def test_override_sets_nested_value_with_yaml_types():
    r = load_recipe("smoke", ["rl.steps=7", "sampling.temperature=0.5", "run.dir=/tmp/x", "eval.k=[1,2]"])
    assert (r.rl.steps, r.sampling.temperature, r.run.dir, r.eval.k) == (7, 0.5, "/tmp/x", [1, 2])
    # derived size computed in one place: prompts x group
    assert r.episodes_per_step == r.rl.prompts_per_step * r.rl.group_size


def test_unknown_override_names_nearest_key():
    with pytest.raises(UserError, match=r"unknown override key 'rl.stpes'; did you mean 'rl.steps'\?"):
        load_recipe("smoke", ["rl.stpes=3"])


def test_unknown_key_in_file_names_nearest(tmp_path):
    p = tmp_path / "r.yaml"
    p.write_text("rl:\n  group_sise: 4\n")
    with pytest.raises(UserError, match=r"unknown key 'rl.group_sise'.*did you mean 'rl.group_size'"):
        load_recipe(str(p))


def test_wrong_type_names_the_key(tmp_path):
    with pytest.raises(UserError, match=r"bad value for 'rl.steps'"):
        load_recipe("smoke", ["rl.steps=many"])


def test_not_yaml_and_not_a_mapping(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rl: [unclosed\n")
    with pytest.raises(UserError, match="not valid YAML at line"):
        load_recipe(str(bad))
    seq = tmp_path / "seq.yaml"
    seq.write_text("- a\n- b\n")
    with pytest.raises(UserError, match="must be a YAML mapping"):
        load_recipe(str(seq))


def test_unknown_recipe_name_suggests():
    with pytest.raises(UserError, match="did you mean 'smoke'"):
        load_recipe("smok")


def test_every_field_has_a_description():
    from pydantic import BaseModel

    def walk(model):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no docstring"
            ann = field.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                walk(ann)

    walk(Recipe)


@pytest.mark.parametrize("recipe, overrides, words", [
    ("smoke", ["rl.mode=async", "gateway.agent=examples/gateway_agent/agent.py:run"], "not combine with rl.mode: async"),
    ("multi_env", ["gateway.agent=examples/gateway_agent/agent.py:run"], "not combine with envs:"),
    ("smoke", ["run.backend=ray", "gateway.agent=examples/gateway_agent/agent.py:run"], "not combine with run.backend: ray"),
    ("smoke", ["learner.ranks=2", "model.device=cuda"], "need a GPU each"),
    ("smoke", ["model.lora.r=8", "model.reference_device=cpu", "model.device=auto"], "adapter disabled"),
])
def test_meaningless_combinations_are_refused_at_load(recipe, overrides, words):
    with pytest.raises(UserError, match=words):
        load_recipe(recipe, overrides)


def test_at_most_two_combination_refusals():
    # every refusal of two settings that do not combine lives in config/combinations.py, one `return` each
    import inspect

    from tracerl.config import combinations

    src = inspect.getsource(combinations.combination_problem)
    assert src.count("return (") + src.count('return f"') + src.count('return "') == 2


@pytest.mark.parametrize("overrides", [
    ["rl.mode=async"], ["rl.mode=async", "model.lora.r=8"], ["rl.mode=async", "engine.name=hf"],
    ["rl.mode=async", "learner.ranks=2"], ["run.backend=ray"], ["run.backend=ray", "model.lora.r=8"],
    ["learner.ranks=2", "rl.algorithm.name=ppo"], ["engine.name=hf", "model.lora.r=8"],
    ["rl.mode=async", "rl.algorithm.correction.kind=mis"],
])
def test_modes_combine_with_a_multi_environment_run(overrides):
    load_recipe("multi_env", overrides)  # once refused with "does not run ... yet"
