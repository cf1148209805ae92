"""Sibling projections multiplied as one stacked pack (`prepack(fuse=True)`, pack_groups.py): each member's
product is its own bit for bit, whatever order or inputs the model calls them with; a weight written in place,
a sync from the learner's state and a dropped pack behave as for a lone packed layer; a recipe's engine on the
tiny Llama model samples the same tokens and log-probs as with unstacked packs."""

import copy

import pytest
import torch
import torch.nn.functional as F

from tracerl.models import prepack as mod
from tracerl.models.prepack import (PackedLinear, drop_packs, group_siblings, pack_all, pack_only_layers, prepack,
                                    release_packed_weights)

pytestmark = pytest.mark.skipif(not mod.prepack_available(), reason="torch without MKL / oneDNN")


class Block(torch.nn.Module):
    def __init__(self, bias: bool):
        super().__init__()
        self.q_proj, self.k_proj = torch.nn.Linear(64, 96, bias=bias), torch.nn.Linear(64, 32, bias=bias)
        self.v_proj = torch.nn.Linear(64, 32, bias=bias)
        self.gate_proj, self.up_proj = torch.nn.Linear(64, 80, bias=False), torch.nn.Linear(64, 80, bias=False)

    def forward(self, x):
        return (self.q_proj(x), self.k_proj(x), self.v_proj(x), self.gate_proj(x), self.up_proj(x))


def _stacked(bias=False):
    torch.manual_seed(0)
    net = Block(bias)
    lone = copy.deepcopy(net)
    prepack(net)  # a Block is no Llama: grouped by hand below
    prepack(lone)
    assert group_siblings(net) == 2 and group_siblings(net) == 0  # a member joins one group once
    return net, lone


@pytest.mark.parametrize("bias", [False, True])
def test_each_member_gets_its_own_product_bit_for_bit(monkeypatch, bias):
    monkeypatch.setattr(mod, "_FP32_KERNEL", "onednn")
    net, lone = _stacked(bias)
    for rows in (1, 2, 3, 4, 7, 8, 16, 17, 32, 40):
        x = torch.randn(rows, 64)
        with torch.no_grad():
            for a, b in zip(net(x), lone(x)):
                assert a.shape == b.shape and torch.equal(a, b)
    with torch.no_grad():
        out = net(torch.randn(2, 5, 64))  # a [B, T, H] prefill keeps its leading dimensions
    assert [o.shape for o in out] == [(2, 5, 96), (2, 5, 32), (2, 5, 32), (2, 5, 80), (2, 5, 80)]
    assert net.q_proj._packed is net.v_proj._packed and net.q_proj._packed is not net.up_proj._packed
    assert net.q_proj._group._last is None and net.up_proj._group._last is None  # the last member freed it


def test_another_order_or_another_input_still_gets_each_members_product(monkeypatch):
    monkeypatch.setattr(mod, "_FP32_KERNEL", "onednn")
    net, lone = _stacked()
    x, y = torch.randn(4, 64), torch.randn(4, 64)
    with torch.no_grad():
        v = net.v_proj(x)
        q = net.q_proj(y)  # another input: multiplied again, not x's columns
        k = net.k_proj(x)
        assert torch.equal(v, lone.v_proj(x)) and torch.equal(q, lone.q_proj(y)) and torch.equal(k, lone.k_proj(x))
        x.mul_(2.0)  # written in place between two members: the version counter says the product is stale
        assert torch.equal(net.k_proj(x), lone.k_proj(x))
        assert torch.equal(net.k_proj(x), lone.k_proj(x))  # the same member twice is multiplied twice
    with torch.inference_mode():  # inference tensors keep no version counter: the tensor alone is remembered
        x = torch.randn(4, 64)
        for a, b in zip(net(x), lone(x)):
            assert torch.equal(a, b)


def test_a_weight_written_in_place_is_packed_again_and_drop_frees_the_stack(monkeypatch):
    monkeypatch.setattr(mod, "_FP32_KERNEL", "onednn")
    net, _ = _stacked(bias=True)
    x = torch.randn(3, 64)
    with torch.no_grad():
        net(x)
        first = net.k_proj._packed
        net.k_proj.weight.mul_(2.0)
        net.v_proj.bias.add_(1.0)  # a bias alone moves too
        k, v = net.k_proj(x), net.v_proj(x)
    assert net.k_proj._packed is not first
    torch.testing.assert_close(k, F.linear(x, net.k_proj.weight, net.k_proj.bias), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(v, F.linear(x, net.v_proj.weight, net.v_proj.bias), rtol=1e-5, atol=1e-5)
    drop_packs(net)
    assert all(m._packed is None for m in net.modules() if isinstance(m, PackedLinear))
    assert net.q_proj._group.packed is None


def test_gradients_fall_back_to_each_members_own_weight(monkeypatch):
    monkeypatch.setattr(mod, "_FP32_KERNEL", "onednn")
    net, _ = _stacked()
    x = torch.randn(3, 64, requires_grad=True)
    sum(o.sum() for o in net(x)).backward()
    assert all(m.weight.grad is not None for m in net.modules() if isinstance(m, PackedLinear))
    assert net.q_proj._group.packed is None


def test_a_sync_stacks_the_incoming_state_and_keeps_no_weight(monkeypatch):
    from tracerl.rollout.engine import TorchEngine

    monkeypatch.setattr(mod, "_FP32_KERNEL", "onednn")
    net, _ = _stacked(bias=True)
    learner = Block(bias=True)
    assert set(pack_only_layers(net)) == {f"{n}.weight" for n in ("q_proj", "k_proj", "v_proj", "gate_proj",
                                                                    "up_proj")}
    pack_all(net)
    assert release_packed_weights(net) == 5 and all(m.weight.numel() == 0 for m in net.modules()
                                                    if isinstance(m, PackedLinear))
    eng = TorchEngine.__new__(TorchEngine)  # the weight handling alone (a Block is not a language model)
    eng.model, eng.threads, eng._owns, eng._asleep, eng.version = net, 1, True, False, 0
    eng._shapes = {n: p.shape for n, p in learner.named_parameters()}
    eng.load_weights(learner.state_dict(), 1)
    assert all(m.weight.numel() == 0 and m._packed is not None for m in net.modules() if isinstance(m, PackedLinear))
    x = torch.randn(5, 64)
    with torch.no_grad():
        for a, b in zip(net(x), learner(x)):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        for a, b in zip(net(x.double()), learner(x)):  # released: any input goes through the stack
            assert a.dtype == torch.float64
            torch.testing.assert_close(a, b.double(), rtol=1e-5, atol=1e-5)


def test_mkl_and_float16_packs_are_not_stacked(monkeypatch):
    monkeypatch.setattr(mod, "_FP32_KERNEL", "mkl")  # MKL's product reads the weight too
    net = Block(False)
    prepack(net)
    assert group_siblings(net) == 0
    monkeypatch.setattr(mod, "_FP32_KERNEL", "onednn")
    half = Block(False)
    prepack(half, half=True)
    assert group_siblings(half) == 0  # a HalfPackedLinear is fbgemm's, not a PackedLinear


def test_the_engine_samples_the_same_tokens_stacked_or_not(tiny, monkeypatch):
    from tracerl.rollout import TorchEngine

    monkeypatch.setattr(mod, "_FP32_KERNEL", "onednn")
    model, tok = tiny
    stacked, lone = copy.deepcopy(model), copy.deepcopy(model)
    prepack(stacked)
    prepack(lone, fuse=False)
    layers = model.config.num_hidden_layers
    assert sum(isinstance(m, PackedLinear) and m._group is not None for m in stacked.modules()) == 5 * layers
    assert not any(isinstance(m, PackedLinear) and m._group is not None for m in lone.modules())
    prompts = [tok("Ann has 3 apples.", add_special_tokens=False)["input_ids"]] * 5
    kw = dict(max_new_tokens=12, temperature=1.0)
    ref = TorchEngine(lone, tok).generate(prompts, generator=torch.Generator().manual_seed(5), **kw)
    out = TorchEngine(stacked, tok).generate(prompts, generator=torch.Generator().manual_seed(5), **kw)
    assert [s.token_ids for s in out] == [s.token_ids for s in ref]
    assert [s.logprobs for s in out] == [s.logprobs for s in ref]
