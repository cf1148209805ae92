"""A packed engine copy keeps its packs alone where its kernel reads nothing else (oneDNN, fbgemm float16): the
weights of those layers are freed, a weight sync packs each one straight from the incoming state without
allocating it, the products stay the learner's (float32: up to rounding), and a state that does not match the
model is refused by name. Which library packs float32 weights follows the CPU (`fp32_pack_kernel`)."""

import copy

import pytest
import torch
import torch.nn.functional as F

from tracerl.models import prepack as mod
from tracerl.models.prepack import PackedLinear, pack_all, pack_only_layers, prepack, release_packed_weights

pytestmark = pytest.mark.skipif(not mod.prepack_available(), reason="torch without MKL / oneDNN")


def _engine_over(net, learner):
    from tracerl.rollout.engine import TorchEngine

    eng = TorchEngine.__new__(TorchEngine)  # the weight handling alone (the module is not a language model)
    eng.model, eng.threads, eng._owns, eng._asleep, eng.version = net, 1, True, False, 0
    eng._shapes = {n: p.shape for n, p in learner.named_parameters()}
    return eng


def test_the_float32_kernel_follows_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    monkeypatch.setattr(mod, "cpu_vendor", lambda: "GenuineIntel")
    assert mod.fp32_pack_kernel() == "mkl"  # measured faster than plain there; its product reads the weight too
    monkeypatch.setattr(mod, "cpu_vendor", lambda: "AuthenticAMD")
    assert mod.fp32_pack_kernel() == "onednn"  # MKL's packs slower than plain on an AVX-512 EPYC
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    monkeypatch.setattr(mod, "cpu_vendor", lambda: "GenuineIntel")
    assert mod.fp32_pack_kernel() == "onednn"


def test_the_cpu_vendor_is_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n")
    assert mod.cpu_vendor(str(info)) == "AuthenticAMD"
    info.write_text("processor\t: 0\n")  # no vendor line (e.g. an ARM kernel)
    assert mod.cpu_vendor(str(info)) == ""
    assert mod.cpu_vendor(str(tmp_path / "missing")) == ""  # not Linux


@pytest.mark.parametrize("half", [False, True])
def test_a_sync_packs_from_the_incoming_state_without_allocating_the_weights(monkeypatch, half):
    if half and not mod.fp16_packs_available():
        pytest.skip("no fbgemm fp16-weight GEMM here")
    monkeypatch.setattr(mod, "_FP32_KERNEL", "onednn")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.Linear(24, 8, bias=False))
    learner = copy.deepcopy(net)
    prepack(net, half=half)
    assert set(pack_only_layers(net)) == {"0.weight", "1.weight"}
    pack_all(net)
    assert release_packed_weights(net) == 2 and all(m.weight.numel() == 0 for m in net)
    x = torch.randn(5, 16)
    tol = dict(rtol=2e-3, atol=2e-3) if half else dict(rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(net(x), learner(x), **tol)

    seen = []
    real = PackedLinear.pack_from

    def watched(self, weight):
        seen.append((self.weight.numel(), weight.data_ptr()))  # nothing allocated before the pack is made
        return real(self, weight)

    monkeypatch.setattr(PackedLinear, "pack_from", watched)
    with torch.no_grad():
        learner[0].weight.mul_(-2.0)
        learner[1].weight.add_(0.5)
    state = learner.state_dict()
    _engine_over(net, learner).load_weights(state, 1)
    assert seen == [(0, state["0.weight"].data_ptr()), (0, state["1.weight"].data_ptr())]
    assert all(m.weight.numel() == 0 and m._packed is not None for m in net)
    assert torch.equal(net[0].bias, learner[0].bias) and net[0].bias is not learner[0].bias  # the rest is copied
    with torch.no_grad():
        torch.testing.assert_close(net(x), learner(x), **tol)
        torch.testing.assert_close(net(x.double()), learner(x).double(), **tol)  # any input goes through the pack


def test_mkl_packs_keep_their_weights_and_a_sync_copies_them(monkeypatch):
    monkeypatch.setattr(mod, "_FP32_KERNEL", "mkl")
    net = torch.nn.Sequential(torch.nn.Linear(8, 8))
    learner = copy.deepcopy(net)
    prepack(net)
    assert pack_only_layers(net) == {}  # MKL's product takes the weight as well as its pack
    pack_all(net)
    assert release_packed_weights(net) == 0 and net[0].weight.numel() == 64
    with torch.no_grad():
        learner[0].weight.mul_(3.0)
    _engine_over(net, learner).load_weights(learner.state_dict(), 1)
    with torch.no_grad():
        x = torch.randn(3, 8)
        torch.testing.assert_close(net(x), F.linear(x, learner[0].weight, learner[0].bias), rtol=1e-5, atol=1e-5)


def test_a_tied_weight_is_kept_and_a_mismatched_state_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(mod, "_FP32_KERNEL", "onednn")
    net = torch.nn.Sequential(torch.nn.Linear(8, 8, bias=False), torch.nn.Linear(8, 8, bias=False))
    net[1].weight = net[0].weight  # tied, as an embedding and its head
    learner = copy.deepcopy(net)
    prepack(net)
    assert pack_only_layers(net) == {}
    pack_all(net)
    assert release_packed_weights(net) == 0 and net[0].weight.numel() == 64

    lone = torch.nn.Sequential(torch.nn.Linear(8, 8, bias=False))
    other = copy.deepcopy(lone)
    prepack(lone)
    pack_all(lone)
    release_packed_weights(lone)
    eng = _engine_over(lone, other)
    with pytest.raises(KeyError, match="have no '0.weight'"):
        eng.load_weights({}, 1)
    with pytest.raises(KeyError, match="unexpected"):
        eng.load_weights(other.state_dict() | {"extra.weight": torch.zeros(1)}, 1)
    assert learner[0].weight.numel() == 64
