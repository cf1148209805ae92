"""A rollout worker (process or Ray actor) samples the learner's weights in the learner's dtype: a
bf16 policy must not be upcast to a float32 copy in the worker (its samples would then come from a
slightly different policy than the one the learner scores)."""

import copy

import torch

from tracerl.rollout.workers import WorkerSettings, load_blob, param_dtype, weights_blob, worker_model


def test_a_bf16_policy_is_rebuilt_in_bf16_and_loads_bit_identically(tiny):
    model, tok = tiny
    learner = copy.deepcopy(model).to(torch.bfloat16)
    settings = WorkerSettings(type(learner), learner.config, tok, spec=None, generator_seed=0, tokenizer_hashes={},
                              dtype=param_dtype(learner))
    assert settings.dtype == "bfloat16"
    copy_in_worker = worker_model(settings)
    load_blob(copy_in_worker, weights_blob(learner))
    assert all(p.dtype == torch.bfloat16 for p in copy_in_worker.parameters())
    for (name, a), b in zip(learner.state_dict().items(), copy_in_worker.state_dict().values()):
        assert torch.equal(a, b), name
    assert param_dtype(model) == "float32" and worker_model(
        WorkerSettings(type(model), model.config, tok, spec=None, generator_seed=0, tokenizer_hashes={})
    ).lm_head.weight.dtype == torch.float32
