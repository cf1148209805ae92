"""`engine.prepack`: linear layers on weights pre-packed for MKL (float32) / oneDNN (bfloat16). The product is
`F.linear`'s up to rounding, a weight written in place (a sync) is packed again, the packs are freed with the
engine's weights, gradients and other dtypes fall back, and a recipe's engine samples through them the same
tokens as the plain engine."""

import copy

import pytest
import torch
import torch.nn.functional as F

from tracerl.models.prepack import PackedLinear, bf16_packs_available, drop_packs, prepack, prepack_available

pytestmark = pytest.mark.skipif(not prepack_available(), reason="torch without MKL / oneDNN")


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_product_is_the_linear_product(dtype, tol, bias):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 96, bias=bias)).to(dtype)
    plain = copy.deepcopy(net)
    assert prepack(net) == 1 and type(net[0]) is PackedLinear
    for shape in ((1, 64), (7, 64), (3, 5, 64), (40, 64)):  # decode rows, a [B, T, H] prefill
        x = torch.randn(*shape, dtype=dtype)
        with torch.no_grad():
            out, ref = net(x), plain(x)
        assert out.shape == ref.shape and out.dtype == dtype
        torch.testing.assert_close(out.float(), ref.float(), rtol=tol, atol=tol)
    # a CPU without oneDNN's bfloat16 kernels (AVX2 only) multiplies bfloat16 weights plainly, and still runs
    assert (net[0]._packed is not None) == (dtype == torch.float32 or bf16_packs_available())
    assert net.state_dict().keys() == plain.state_dict().keys()  # a sync loads the same state dict


def test_a_weight_written_in_place_is_packed_again_and_drop_frees_the_pack():
    net = torch.nn.Sequential(torch.nn.Linear(8, 4, bias=False))
    prepack(net)
    x = torch.randn(3, 8)
    with torch.no_grad():
        before = net(x)
        first = net[0]._packed
        net[0].weight.mul_(2.0)  # what load_state_dict's copy_ does: the version counter moves
        after = net(x)
    torch.testing.assert_close(after, 2 * before, rtol=1e-5, atol=1e-6)
    assert net[0]._packed is not first
    drop_packs(net)
    assert net[0]._packed is None


def test_gradients_and_other_autocast_dtypes_fall_back_to_the_plain_product():
    net = torch.nn.Sequential(torch.nn.Linear(8, 4))
    prepack(net)
    x = torch.randn(3, 8, requires_grad=True)
    net(x).sum().backward()  # the packed kernels have no backward: the layer must run F.linear
    assert net[0].weight.grad is not None and x.grad is not None and net[0]._packed is None
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):  # float32 weights, bf16 autocast
        out = net(x)
    assert out.dtype == torch.bfloat16 and net[0]._packed is None
    with torch.no_grad():
        torch.testing.assert_close(net(x), F.linear(x, net[0].weight, net[0].bias))


def test_the_engine_samples_the_same_tokens_on_packed_weights(tiny):
    from tracerl.rollout import TorchEngine

    model, tok = tiny
    packed = copy.deepcopy(model)
    assert prepack(packed) > 0
    prompts = [tok("Ann has 3 apples.", add_special_tokens=False)["input_ids"]] * 4
    kw = dict(max_new_tokens=12, temperature=1.0)
    ref = TorchEngine(model, tok).generate(prompts, generator=torch.Generator().manual_seed(5), **kw)
    out = TorchEngine(packed, tok).generate(prompts, generator=torch.Generator().manual_seed(5), **kw)
    assert [s.token_ids for s in out] == [s.token_ids for s in ref]
    for a, b in zip(out, ref):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4
    assert any(m._packed is not None for m in packed.modules() if isinstance(m, PackedLinear))


def test_a_recipe_engine_samples_a_packed_copy_that_sleeps_and_syncs(tiny):
    from tracerl.config import load_recipe
    from tracerl.rollout.engine_api import sleep_engine, sync_weights
    from tracerl.rollout.engines import build_engine, engine_problem

    model, tok = tiny
    model = copy.deepcopy(model)  # its weights move below: never the session's shared model
    cfg = load_recipe("smoke", ["engine.prepack=true"]).engine
    eng = build_engine(cfg, model, tok)
    assert eng.owns_weights and eng.model is not model
    layers = [m for m in eng.model.modules() if isinstance(m, PackedLinear)]
    assert layers and not any(isinstance(m, PackedLinear) for m in model.modules())  # the learner is untouched
    prompts = [[5, 6, 7]] * 2
    eng.generate(prompts, max_new_tokens=3, generator=torch.Generator().manual_seed(0))
    assert all(m._packed is not None for m in layers)
    sleep_engine(eng)
    assert all(m._packed is None for m in layers)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    sync_weights(eng, model, 1)
    eng.generate(prompts, max_new_tokens=3, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(eng.model.lm_head.weight, model.lm_head.weight)
    assert engine_problem(cfg, "cuda") and "engine.prepack" in engine_problem(cfg, "cuda")
    assert engine_problem(cfg, "cpu") is None
