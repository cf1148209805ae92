"""The `engine:` section: each refusal is one sentence at load time; vLLM without vLLM or a GPU is
refused before a run writes anything; the torch engine is what a recipe gets by default."""

import pytest

from tracerl.config import load_recipe
from tracerl.errors import UserError


@pytest.mark.parametrize("overrides, needle", [
    (["engine.name=hf", "engine.max_model_len=512"], "applies to engine.name vllm only"),
    (["engine.name=vllm", "gateway.agent=examples/gateway_agent/agent.py:run"], "gateway.agent does not combine with engine.name: vllm"),
    (["engine.name=bogus"], "engine.name"),
    (["engine.name=hf", "engine.prepack=true"], "engine.prepack applies to engine.name torch"),
    (["engine.name=hf", "engine.threads=1"], "engine.threads applies to engine.name torch"),
    (["engine.threads=0"], "engine.threads"),
    (["engine.name=hf", "engine.lean_decode=true"], "engine.lean_decode applies to engine.name torch"),
])
def test_bad_engine_settings_are_refused_in_one_sentence(overrides, needle):
    with pytest.raises(UserError, match=needle):
        load_recipe("smoke", overrides)


@pytest.mark.parametrize("overrides", [["rl.mode=async"], ["run.backend=ray"], ["model.lora.r=8"], ["model.autocast=bf16"],
                                       ["learner.ranks=2", "model.device=cpu"], ["rl.mode=async", "model.lora.r=8"]])
def test_engines_combine_with_every_mode_at_load(overrides):
    assert load_recipe("smoke", ["engine.name=hf", *overrides]).engine.name == "hf"


def test_the_torch_engine_in_another_dtype_samples_its_own_copy_synced_by_version(tiny):
    """engine.dtype on the torch engine: the learner's dtype shares the module (a sync is a version bump);
    another dtype is a plain copy of its own in that dtype, which a sync refreshes from the learner."""
    import torch

    from tracerl.rollout.engine_api import sync_weights
    from tracerl.rollout.engines import build_engine

    *_, model, tok = tiny
    shared = build_engine(load_recipe("smoke", ["engine.dtype=float32"]).engine, model, tok)
    assert shared.model is model and not shared.owns_weights
    eng = build_engine(load_recipe("smoke", ["engine.dtype=bfloat16"]).engine, model, tok)
    assert eng.owns_weights and eng.model is not model
    assert {p.dtype for p in eng.model.parameters()} == {torch.bfloat16} and next(model.parameters()).dtype == torch.float32
    name, p = next(iter(model.named_parameters()))
    with torch.no_grad():
        p.add_(0.5)  # an update of the learner
    assert not torch.equal(eng.model.state_dict()[name], p.to(torch.bfloat16))
    assert sync_weights(eng, model, 3) and eng.version == 3
    assert torch.equal(eng.model.state_dict()[name], p.detach().to(torch.bfloat16))
    with torch.no_grad():
        p.sub_(0.5)


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


def test_an_engine_copy_sleeps_through_the_update_and_wakes_with_the_new_weights(tiny):
    """`sleep` frees the copy's weights (the learner's memory while it updates); generating while asleep is
    refused in one sentence; the publish's `load_weights` wakes it with the new version, same tokens as a copy
    that never slept. A shared module never sleeps."""
    import torch

    from tracerl.rollout.engine_api import sleep_engine, sync_weights
    from tracerl.rollout.engines import build_engine

    *_, model, tok = tiny
    cfg = load_recipe("smoke", ["engine.dtype=bfloat16"]).engine
    eng, awake = build_engine(cfg, model, tok), build_engine(cfg, model, tok)
    before = sum(p.numel() for p in eng.model.parameters())
    sleep_engine(eng)
    assert sum(p.numel() for p in eng.model.parameters()) == 0 < before
    with pytest.raises(RuntimeError, match="asleep"):
        eng.generate([[1, 2, 3]], max_new_tokens=2)
    assert sync_weights(eng, model, 1) and sync_weights(awake, model, 1)
    assert sum(p.numel() for p in eng.model.parameters()) == before
    gen = lambda e: e.generate([[1, 2, 3]] * 2, max_new_tokens=4, generator=torch.Generator().manual_seed(0))  # noqa: E731
    assert [s.token_ids for s in gen(eng)] == [s.token_ids for s in gen(awake)]
    shared = build_engine(load_recipe("smoke").engine, model, tok)
    sleep_engine(shared)
    assert shared.model is model and all(p.numel() for p in model.parameters())


@pytest.mark.parametrize("kernels", [False, True])
def test_a_bfloat16_engine_on_a_cpu_without_bf16_kernels_is_warned_about(tiny, monkeypatch, kernels):
    import warnings

    import tracerl.models.prepack as prepack_mod
    from tracerl.rollout.engines import build_engine

    *_, model, tok = tiny
    monkeypatch.setattr(prepack_mod, "bf16_packs_available", lambda: kernels)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        build_engine(load_recipe("smoke", ["engine.dtype=bfloat16"]).engine, model, tok)
        build_engine(load_recipe("smoke", ["engine.dtype=float32"]).engine, model, tok)
    slow = [w for w in seen if "engine.dtype bfloat16 on a CPU without bfloat16 matmul kernels" in str(w.message)]
    assert len(slow) == (0 if kernels else 1)
