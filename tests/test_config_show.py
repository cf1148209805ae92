"""List-index overrides, errors that name the override that caused them, and `tracerl config show`."""

import pytest
import yaml

from tracerl.cli import main
from tracerl.config import Recipe, load_recipe
from tracerl.errors import UserError


def test_list_items_are_overridable_by_index():
    r = load_recipe("staged", ["rl.stages.0.steps=3", "eval.k.1=2"])
    base = load_recipe("staged")
    assert r.rl.stages[0].steps == 3 and r.rl.stages[1].steps == base.rl.stages[1].steps
    assert r.rl.steps == 3 + base.rl.stages[1].steps  # the derived total follows the stages
    assert r.eval.k == [base.eval.k[0], 2]
    with pytest.raises(UserError, match=r"override 'eval.k.1=8'"):  # k > eval.samples, blamed on the override
        load_recipe("staged", ["eval.k.1=8"])
    appended = load_recipe("smoke", ["rl.stages.0.name=warm", "rl.stages.0.steps=2"])
    assert [(s.name, s.steps) for s in appended.rl.stages] == [("warm", 2)] and appended.rl.steps == 2


@pytest.mark.parametrize("overrides,needle", [
    (["rl.lr=abc"], "bad value for 'rl.lr' in override 'rl.lr=abc'"),
    (["rl.stages.0.steps=0"], "bad value for 'rl.stages.0.name' in override 'rl.stages.0.steps=0'"),
    (["eval.k.5=3"], "eval.k has 2 items, so index 5 is out of range"),
    (["rl.stages.x=1"], "'rl.stages' is a list; index it with a number"),
    (["rl.lr.x=1"], "'rl.lr' is a value, not a section"),
    (["rl.stepz=3"], "did you mean 'rl.steps'"),
])
def test_bad_overrides_are_blamed_on_the_override(overrides, needle):
    with pytest.raises(UserError) as err:
        load_recipe("smoke", overrides)
    assert needle in str(err.value)


def test_a_bad_recipe_value_is_still_blamed_on_the_recipe(tmp_path):
    bad = tmp_path / "r.yaml"
    bad.write_text("rl: {lr: fast}\n")
    with pytest.raises(UserError, match=rf"bad value for 'rl.lr' in {bad}"):
        load_recipe(str(bad), ["rl.steps=3"])


def test_config_show_prints_loadable_yaml_with_every_field_documented(capsys, tmp_path):
    assert main(["config", "show", "staged", "rl.stages.0.steps=3"]) == 0
    out = capsys.readouterr().out
    data = yaml.safe_load(out)  # the comments are YAML comments: the output loads back as a recipe
    again = Recipe.model_validate(data)
    assert again == load_recipe("staged", ["rl.stages.0.steps=3"])
    lines = [ln for ln in out.splitlines() if not ln.startswith("#")]
    undocumented = [ln for ln in lines if "  # " not in ln]
    assert undocumented == [], undocumented[:5]
    assert main(["config", "show", "smoke", "rl.lr=oops"]) == 2
    assert "in override 'rl.lr=oops'" in capsys.readouterr().err
