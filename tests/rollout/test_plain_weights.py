"""Every holder of its own copy of the policy (a rollout worker process, a Ray actor, the HF engine on a copy)
loads the policy as a plain model (models/weights.py): a LoRA policy's adapters merged into the base weights,
under the plain architecture's keys, sampled under the policy's autocast through the recipe's engine."""

import copy

import pytest
import torch

pytest.importorskip("peft")

from tracerl.config import load_recipe  # noqa: E402
from tracerl.envs import get_env  # noqa: E402
from tracerl.models import lora  # noqa: E402
from tracerl.models.precision import autocast_dtype, set_autocast  # noqa: E402
from tracerl.models.weights import plain_copy, plain_state_dict  # noqa: E402
from tracerl.config.model import LoraSettings  # noqa: E402
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes  # noqa: E402
from tracerl.rollout.engine_api import sync_weights  # noqa: E402
from tracerl.rollout.hf_engine import HFGenerateEngine  # noqa: E402
from tracerl.rollout.workers import (InProcessWorker, ProcessWorker, RolloutJob, Runner, SpecRef,  # noqa: E402
                                     weights_blob, worker_engine, worker_model, worker_settings)

POINTER = {"path": "base", "gguf_file": None, "dtype": "float32", "relative": True}
BUDGETS = LoopBudgets(max_turns=2, max_tokens=160, max_new_tokens=12)
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}


def _nudge_adapter(model, seed: int, scale: float = 0.3) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.add_(scale * torch.randn(p.shape, generator=g))


@pytest.fixture(scope="module")
def lora_policy(tiny):
    model, _ = tiny
    m = lora.attach_lora(copy.deepcopy(model), LoraSettings(r=4, alpha=8.0), pointer=POINTER)
    _nudge_adapter(m, 0)  # B starts at zero: a nonzero adapter, so merged and base weights differ
    m.eval()
    return m


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_plain_weights_of_a_lora_policy_are_the_merged_policy(tiny, lora_policy):
    base, tok = tiny
    ids = torch.randint(0, len(tok), (3, 17), generator=torch.Generator().manual_seed(1))
    before = {k: v.clone() for k, v in lora_policy.state_dict().items()}
    sd = plain_state_dict(lora_policy)
    assert sd.keys() == base.state_dict().keys()  # the plain architecture's keys, no adapter tensors
    twin = plain_copy(lora_policy)
    assert not lora.is_lora(twin) and type(twin) is type(base)
    peft_out, plain_out = _logits(lora_policy, ids), _logits(twin, ids)
    assert (peft_out - plain_out).abs().max() < 1e-5
    with lora.peft_of(lora_policy).disable_adapter():  # the adapter is really there (not a no-op merge)
        assert (_logits(lora_policy, ids) - peft_out).abs().max() > 1e-2
    after = lora_policy.state_dict()  # the learner's module is neither copied into nor merged in place
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    assert not any(getattr(m, "merged", False) for m in lora_policy.modules())
    plain = plain_state_dict(base)  # a plain model: its own tensors, untouched
    assert all(plain[k].data_ptr() == v.data_ptr() for k, v in base.state_dict().items())
    merged = plain_copy(lora_policy)  # `tracerl merge` folds the adapter the same way
    assert all(torch.equal(merged.state_dict()[k], v) for k, v in sd.items())


def test_the_hf_engine_copy_follows_the_lora_policy_at_each_sync(tiny, lora_policy):
    _, tok = tiny
    learner = copy.deepcopy(lora_policy)
    engine = HFGenerateEngine.from_learner(learner, tok)
    ids = torch.randint(0, len(tok), (2, 9), generator=torch.Generator().manual_seed(2))
    assert (_logits(engine.model, ids) - _logits(learner, ids)).abs().max() < 1e-5
    _nudge_adapter(learner, 5)  # an update of the adapter
    assert sync_weights(engine, learner, 7) and engine.version == 7
    assert (_logits(engine.model, ids) - _logits(learner, ids)).abs().max() < 1e-5


def _job(tasks, gen_state):
    return RolloutJob(0, tasks, [f"g{i}" for i in range(len(tasks))], seed=3, budgets=BUDGETS, sampling=SAMPLING,
                      generator_state=gen_state)


def _tokens(trajs):
    return [t.token_ids for t in trajs]


def test_an_async_worker_samples_the_lora_policys_tokens(tiny, lora_policy):
    """A worker's own copy (built from WorkerSettings, loaded from the blob) draws the tokens the in-process
    engine on the peft model draws from the same generator state."""
    _, tok = tiny
    spec = get_env("math_tool")
    tasks = spec.generate("train", 4, 0)
    recipe = load_recipe("smoke", ["model.lora.r=4"])
    settings = worker_settings(lora_policy, tok, recipe, SpecRef("math_tool"), {}, seed=0, partial=False)
    assert settings.model_class is type(tiny[0]) and settings.engine == "torch" and settings.device == "cpu"
    copy_model = worker_model(settings).eval()
    w = InProcessWorker(0, Runner(copy_model, tok, spec, generator_seed=0, tokenizer_hashes={},
                                  engine=worker_engine(settings, copy_model, tok)))
    w.send_weights(4, weights_blob(lora_policy))
    state = torch.Generator().manual_seed(11).get_state()
    w.submit(_job(tasks, state))
    (_, res), = [e for e in w.events() if e[0] == "done"]
    gen = torch.Generator().set_state(state)
    ref = run_episodes(TorchEngine(lora_policy, tok), spec, tasks, [f"g{i}" for i in range(4)], budgets=BUDGETS,
                       sampling=SAMPLING, policy_version=4, seed=3, generator=gen)
    assert _tokens(res.trajectories) == _tokens(ref) and sum(t.num_action_tokens for t in ref) >= 12
    assert torch.equal(res.generator_state, gen.get_state())
    for a, b in zip(res.trajectories, ref):
        la, lb = torch.tensor(a.behavior_logprobs), torch.tensor(b.behavior_logprobs)
        assert torch.equal(la.isnan(), lb.isnan()) and (la - lb).nan_to_num().abs().max() < 1e-5


@pytest.mark.timeout(300)
def test_a_worker_process_runs_the_recipes_engine_under_autocast_on_the_merged_policy(tiny, lora_policy):
    """engine.name hf + model.autocast bf16 + LoRA in a spawned worker: the same tokens as the trainer's own HF
    engine on its plain copy (same weights, same autocast, same seed)."""
    _, tok = tiny
    spec = get_env("math_tool")
    tasks = spec.generate("train", 3, 1)
    learner = set_autocast(copy.deepcopy(lora_policy), "bf16")
    recipe = load_recipe("smoke", ["model.lora.r=4", "model.autocast=bf16", "engine.name=hf"])
    settings = worker_settings(learner, tok, recipe, SpecRef("math_tool"), {}, seed=0, partial=False)
    assert settings.autocast == "bf16" and settings.engine == "hf"
    assert autocast_dtype(worker_model(settings)) == torch.bfloat16
    state = torch.Generator().manual_seed(5).get_state()
    w = ProcessWorker(0, settings)
    try:
        w.send_weights(2, weights_blob(learner))
        w.submit(_job(tasks, state))
        res = None
        for _ in range(600):
            res = next((e[1] for e in w.events(0.5) if e[0] == "done"), None)
            if res is not None or not w.alive():
                break
        assert res is not None, "the worker process returned nothing"
    finally:
        w.close()
    engine = HFGenerateEngine.from_learner(learner, tok)
    assert autocast_dtype(engine.model) == torch.bfloat16
    gen = torch.Generator().set_state(state)
    ref = run_episodes(engine, spec, tasks, [f"g{i}" for i in range(3)], budgets=BUDGETS, sampling=SAMPLING,
                       policy_version=2, seed=3, generator=gen)
    assert _tokens(res.trajectories) == _tokens(ref) and sum(t.num_action_tokens for t in ref) >= 9
    assert {v for t in res.trajectories for v in t.policy_versions if v >= 0} == {2}
