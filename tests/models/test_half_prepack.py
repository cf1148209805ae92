"""`engine.prepack: float16`: float32 activations times linear weights packed in half precision for fbgemm. The
product is the product with the weights rounded to float16 (worked by hand below), a weight written in place is
packed again, gradients / other dtypes / autocast fall back to `F.linear`, and a recipe's engine samples from a
float32 copy without autocast whose layers are half-packed, in the trainer and in a rollout worker alike."""

import copy

import pytest
import torch
import torch.nn.functional as F

from tracerl.errors import UserError
from tracerl.models.prepack import HalfPackedLinear, PackedLinear, drop_packs, fp16_packs_available, pack_all, prepack

pytestmark = pytest.mark.skipif(not fp16_packs_available(), reason="no fbgemm fp16-weight GEMM on this CPU / torch")


def test_the_product_is_the_product_with_float16_weights_worked_by_hand():
    lin = torch.nn.Linear(1, 2, bias=False)
    with torch.no_grad():  # 1 + 2^-12 is not a float16 (its spacing at 1 is 2^-10): it rounds to 1; 0.5 is exact
        lin.weight.copy_(torch.tensor([[1.0 + 2.0 ** -12], [0.5]]))
    prepack(torch.nn.Sequential(lin), half=True)
    assert type(lin) is HalfPackedLinear
    with torch.no_grad():
        out = lin(torch.tensor([[1024.0]]))
    assert out.tolist() == [[1024.0, 512.0]]  # float32 weights would give 1024.25
    assert F.linear(torch.tensor([[1024.0]]), lin.weight).tolist() == [[1024.25, 512.0]]


@pytest.mark.parametrize("bias", [False, True])
def test_packed_product_equals_the_linear_product_on_rounded_weights(bias):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 96, bias=bias))
    plain = copy.deepcopy(net)
    assert prepack(net, half=True) == 1
    for shape in ((1, 64), (7, 64), (3, 5, 64), (40, 64)):  # decode rows, a [B, T, H] prefill
        x = torch.randn(*shape)
        with torch.no_grad():
            out = net(x)
            ref = F.linear(x, plain[0].weight.half().float(), plain[0].bias)
        assert out.shape == ref.shape and out.dtype == torch.float32
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert net.state_dict().keys() == plain.state_dict().keys()  # a sync loads the same state dict


def test_a_rewritten_weight_is_packed_again_and_the_rest_falls_back():
    net = torch.nn.Sequential(torch.nn.Linear(8, 4, bias=False))
    prepack(net, half=True)
    x = torch.randn(3, 8)
    with torch.no_grad():
        before = net(x)
        first = net[0]._packed
        net[0].weight.mul_(2.0)  # a sync's in-place copy: the version counter moves
        after = net(x)
    torch.testing.assert_close(after, 2 * before)
    assert net[0]._packed is not first
    drop_packs(net)
    assert net[0]._packed is None
    xg = torch.randn(3, 8, requires_grad=True)
    net(xg).sum().backward()  # no backward through the packed kernel: F.linear, exact
    assert net[0]._packed is None and xg.grad is not None
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert net(x).dtype == torch.bfloat16 and net[0]._packed is None
    with torch.no_grad():
        torch.testing.assert_close(net.to(torch.float64)(x.double()), F.linear(x.double(), net[0].weight))
    assert net[0]._packed is None


def test_a_recipe_engine_samples_a_float32_half_packed_copy_without_autocast(tiny):
    from tracerl.config import load_recipe
    from tracerl.models.precision import autocast_dtype
    from tracerl.rollout.engine_api import sleep_engine, sync_weights
    from tracerl.rollout.engines import build_engine
    from tracerl.telemetry.probe import run_probe

    model, tok = tiny
    model = copy.deepcopy(model)  # its weights move below: never the session's shared model
    cfg = load_recipe("smoke", ["engine.prepack=float16", "model.autocast=bf16"]).engine
    eng = build_engine(cfg, model, tok)
    layers = [m for m in eng.model.modules() if isinstance(m, HalfPackedLinear)]
    assert layers and eng.owns_weights and autocast_dtype(eng.model) is None
    assert next(eng.model.parameters()).dtype == torch.float32
    prompts = [tok("Ann has 3 apples.", add_special_tokens=False)["input_ids"]] * 3
    probe = run_probe(eng, model, prompts, max_new_tokens=8, temperature=1.0)
    assert all(m._packed is not None for m in layers)
    assert 0.0 < probe["probe/logprob_absdiff_max"] < 0.05  # float16 rounding: close to the learner, not equal
    sleep_engine(eng)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    sync_weights(eng, model, 1)
    assert all(m._packed is not None for m in layers)  # packed at the sync (pack_all), not in the first forward
    # the float32 weights of the packed layers are freed (the packs are what they multiply); the tied head stays
    assert all(m.weight.numel() == 0 for m in layers if m is not eng.model.lm_head)
    assert eng.model.lm_head.weight.numel() > 0 and eng.model.lm_head.weight is eng.model.model.embed_tokens.weight
    assert run_probe(eng, model, prompts, max_new_tokens=8)["probe/logprob_absdiff_max"] < 0.05
    torch.testing.assert_close(eng.model.lm_head.weight, model.lm_head.weight)


def test_a_rollout_worker_packs_its_copy_in_half_precision(tiny):
    from tracerl.config import load_recipe
    from tracerl.rollout.workers import SpecRef, worker_engine, worker_model, worker_settings

    model, tok = tiny
    recipe = load_recipe("smoke", ["engine.prepack=float16", "model.autocast=bf16"])
    settings = worker_settings(model, tok, recipe, SpecRef("math_tool"), {}, seed=0, partial=False)
    assert (settings.dtype, settings.autocast, settings.prepack) == ("float32", None, "float16")
    eng = worker_engine(settings, worker_model(settings), tok)
    assert any(isinstance(m, HalfPackedLinear) for m in eng.model.modules())


def test_half_packing_is_refused_where_it_cannot_run(monkeypatch):
    from tracerl.config import load_recipe
    from tracerl.models import prepack as mod
    from tracerl.rollout.engines import engine_problem

    with pytest.raises(UserError, match="engine.prepack float16 packs a float32 copy"):
        load_recipe("smoke", ["engine.prepack=float16", "engine.dtype=bfloat16"])
    with pytest.raises(UserError, match="engine.prepack applies to engine.name torch"):
        load_recipe("smoke", ["engine.prepack=float16", "engine.name=hf"])
    cfg = load_recipe("smoke", ["engine.prepack=float16"]).engine
    assert engine_problem(cfg, "cpu") is None and "model.device=cpu" in engine_problem(cfg, "cuda")
    monkeypatch.setattr(mod, "fp16_packs_available", lambda: False)
    assert "fbgemm's fp16-weight matmul" in engine_problem(cfg, "cpu")


@pytest.mark.parametrize("half", [False, True])
def test_pack_all_packs_every_layer_as_its_first_product_would(half):
    from tracerl.models.prepack import prepack_available

    if not half and not prepack_available():
        pytest.skip("torch without MKL / oneDNN")
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(6)], torch.nn.Linear(32, 8).double())
    prepack(net, half=half)
    x = torch.randn(5, 32)
    with torch.no_grad():
        lazy = net[:6](x)  # each layer packs at its first product
    drop_packs(net)
    assert pack_all(net) == 6  # the float64 layer cannot be packed: left to F.linear
    assert all(isinstance(m, PackedLinear) and m._packed is not None for m in net[:6]) and net[6]._packed is None
    with torch.no_grad():
        assert torch.equal(net[:6](x), lazy)


def test_a_released_layer_multiplies_through_its_pack_and_is_allocated_again_at_the_next_load():
    from tracerl.models.prepack import release_packed_weights
    from tracerl.rollout.engine import TorchEngine

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 16, bias=False))
    x = torch.randn(4, 16)
    with torch.no_grad():
        ref = F.linear(F.linear(x, net[0].weight.half().float(), net[0].bias), net[1].weight.half().float())
    learner = copy.deepcopy(net)
    prepack(net, half=True)
    pack_all(net)
    assert release_packed_weights(net) == 2 and all(m.weight.numel() == 0 for m in net)
    with torch.no_grad():
        torch.testing.assert_close(net(x), ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(net(x.double()), ref.double(), rtol=1e-5, atol=1e-5)  # any input: through the pack

    eng = TorchEngine.__new__(TorchEngine)  # the weight handling alone (the module is not a language model)
    eng.model, eng.threads, eng._owns, eng._asleep, eng.version = net, 1, True, False, 0
    eng._shapes = {n: p.shape for n, p in learner.named_parameters()}
    with torch.no_grad():
        learner[1].weight.mul_(2.0)
    eng.load_weights(learner.state_dict(), 1)
    assert all(m.weight.numel() == 0 and m._packed is not None for m in net)  # loaded, packed, released again
    with torch.no_grad():
        assert torch.allclose(net(x), 2 * ref, rtol=1e-3, atol=1e-3)
