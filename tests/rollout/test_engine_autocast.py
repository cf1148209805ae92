"""Under `model.autocast: bf16` the engine session casts each weight to bf16 once per call, not once per
decode step, and still samples what the reference loop (a cast per forward) samples."""

import copy

import torch

from tracerl.models.precision import set_autocast
from tracerl.rollout import TorchEngine
from tracerl.rollout.kv_session import GenerationSession


def _weight_casts(fn, weight_shapes: set[tuple[int, ...]]) -> tuple[int, object]:
    """How many fp32 -> bf16 copies of a tensor shaped like a Linear weight `fn` makes (activations are 3-D)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        out = fn()
    n = sum(1 for e in prof.events() if e.name == "aten::_to_copy" and e.input_shapes
            and tuple(e.input_shapes[0]) in weight_shapes)
    return n, out


def test_bf16_session_casts_each_weight_once_per_call_and_matches_the_reference(tiny):
    model, tok = tiny
    m = set_autocast(copy.deepcopy(model), "bf16").eval()
    linears = [mod for mod in m.modules() if isinstance(mod, torch.nn.Linear)]
    shapes = {tuple(mod.weight.shape) for mod in linears}
    engine = TorchEngine(m, tok)
    prompts = [tok("Bo has 12 coins. How many?", add_special_tokens=False)["input_ids"]] * 3
    steps = 8
    kw = dict(max_new_tokens=steps, temperature=1.0)  # no stop token: every row decodes 8 tokens, 8 forwards

    casts_ref, ref = _weight_casts(
        lambda: engine.generate_reference(prompts, generator=torch.Generator().manual_seed(4), **kw), shapes)
    casts_fast, fast = _weight_casts(
        lambda: GenerationSession(engine).generate(list(range(3)), prompts, generator=torch.Generator().manual_seed(4),
                                                   **kw), shapes)
    # the reference casts every Linear weight in each of its 8 forwards; the session once in all
    assert casts_ref >= steps * len(linears)
    assert 0 < casts_fast <= len(linears)
    for f, r in zip(fast, ref):  # same bf16 weights, so the same tokens; log-probs within bf16 layout noise
        assert f.token_ids == r.token_ids and len(f.token_ids) == steps
        assert max(abs(a - b) for a, b in zip(f.logprobs, r.logprobs)) < 2e-2


def test_fp32_session_makes_no_weight_copies(tiny):
    model, tok = tiny
    linears = {tuple(mod.weight.shape) for mod in model.modules() if isinstance(mod, torch.nn.Linear)}
    engine = TorchEngine(model.eval(), tok)
    prompts = [tok("7", add_special_tokens=False)["input_ids"]] * 2
    casts, _ = _weight_casts(lambda: engine.generate(prompts, max_new_tokens=4,
                                                     generator=torch.Generator().manual_seed(0)), linears)
    assert casts == 0
