"""The `engine:` section: each refusal is one sentence at load time; vLLM without vLLM or a GPU is
refused before a run writes anything; the torch engine is what a recipe gets by default."""

import pytest

from tracerl.config import load_recipe
from tracerl.errors import UserError


@pytest.mark.parametrize("overrides, needle", [
    (["engine.dtype=bfloat16"], "set model.dtype instead"),
    (["engine.name=hf", "engine.max_model_len=512"], "applies to engine.name vllm only"),
    (["engine.name=vllm", "gateway.agent=examples/gateway_agent/agent.py:run"], "gateway.agent does not combine with engine.name: vllm"),
    (["engine.name=bogus"], "engine.name"),
])
def test_bad_engine_settings_are_refused_in_one_sentence(overrides, needle):
    with pytest.raises(UserError, match=needle):
        load_recipe("smoke", overrides)


@pytest.mark.parametrize("overrides", [["rl.mode=async"], ["run.backend=ray"], ["model.lora.r=8"], ["model.autocast=bf16"],
                                       ["learner.ranks=2", "model.device=cpu"], ["rl.mode=async", "model.lora.r=8"]])
def test_engines_combine_with_every_mode_at_load(overrides):
    assert load_recipe("smoke", ["engine.name=hf", *overrides]).engine.name == "hf"


def test_a_resolved_config_round_trips():
    r = load_recipe("smoke", ["engine.name=hf", "engine.dtype=bfloat16"])
    again = type(r).model_validate(r.model_dump(mode="json"))  # what config.yaml holds on resume
    assert again.engine == r.engine and load_recipe("smoke").engine.name == "torch"


def test_vllm_is_refused_before_the_run_writes_anything(tmp_path):
    from tracerl.rollout.vllm_engine import vllm_problem
    from tracerl.run.pipeline import run_recipe

    problem = vllm_problem()
    if problem is None:
        pytest.skip("vLLM and a GPU are present here")
    run_dir = tmp_path / "run"
    with pytest.raises(UserError) as err:
        run_recipe(load_recipe("smoke", [f"run.dir={run_dir}", "engine.name=vllm"]))
    assert str(err.value) == problem and "engine.name=torch" in problem and not run_dir.exists()
