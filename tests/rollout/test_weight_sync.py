"""Weight sync by version (rollout/weight_sync.py): buckets, full loads, LoRA adapter-only syncs, the meter."""

import copy

import pytest
import torch

from tracerl.models.weights import plain_copy, plain_state_dict
from tracerl.rollout.weight_sync import Receiver, SyncMeter, _bucketed, _load, payload


def test_buckets_hold_at_most_their_size_and_every_tensor_once():
    """Tensors of 4, 4, 12 and 4 KiB (1024, 1024, 3072, 1024 floats) in 8 KiB buckets: [a, b], [c] (alone:
    larger than a bucket), [d]."""
    t = {"a": torch.ones(1024), "b": torch.ones(1024), "c": torch.ones(3072), "d": torch.ones(1024)}
    blobs = _bucketed(t, 8 / 1024)
    assert [sorted(_load(b)) for b in blobs] == [["a", "b"], ["c"], ["d"]]


def test_a_full_payload_loads_the_plain_weights(tiny):
    model, _ = tiny
    p = payload(model, 7, bucket_mb=0.01)
    assert p.version == 7 and p.kind == "full" and len(p.buckets) > 1
    assert p.nbytes == sum(len(b) for b in p.buckets)
    twin = plain_copy(model)
    for q in twin.parameters():
        q.data.zero_()
    Receiver().load(twin, p)
    for k, v in plain_state_dict(model).items():
        assert torch.equal(twin.state_dict()[k], v)


def test_lora_syncs_only_adapters_after_the_first_and_merges_as_peft(tiny):
    """A LoRA policy: the first sync is full (base with adapters merged), later ones carry A, B and the scaling
    of each adapted layer only; the worker's merge W + (alpha/r)·B·A equals the learner's plain weights exactly."""
    pytest.importorskip("peft")
    from tracerl.config.model import LoraSettings
    from tracerl.models import lora
    from tracerl.rollout.parallel import adapters_suffice

    model, _ = tiny
    policy = lora.attach_lora(copy.deepcopy(model), LoraSettings(r=4, alpha=8.0),
                              pointer={"path": "base", "gguf_file": None, "dtype": "float32", "relative": True})
    assert adapters_suffice(policy) and not adapters_suffice(model)
    worker, rx = plain_copy(policy), Receiver()
    rx.load(worker, payload(policy, 1, 64))
    with torch.no_grad():  # an update moves the adapters (B starts at 0: the first sync is the base itself)
        for n, q in policy.named_parameters():
            if "lora_" in n:
                q.add_(torch.randn_like(q) * 0.1)
    small = payload(policy, 2, 64, adapters_only=True)
    full = payload(policy, 2, 64)
    assert small.kind == "lora" and small.nbytes < full.nbytes / 3
    rx.load(worker, small)
    want = plain_state_dict(policy)
    moved = [k for k, v in want.items() if not torch.equal(v, plain_state_dict(model)[k])]
    assert moved  # the adapters changed some weights
    for k, v in want.items():
        assert torch.equal(worker.state_dict()[k], v), k


def test_an_adapter_sync_before_any_full_one_is_refused(tiny):
    pytest.importorskip("peft")
    from tracerl.config.model import LoraSettings
    from tracerl.models import lora

    model, _ = tiny
    policy = lora.attach_lora(copy.deepcopy(model), LoraSettings(r=4, alpha=8.0),
                              pointer={"path": "base", "gguf_file": None, "dtype": "float32", "relative": True})
    with pytest.raises(RuntimeError, match="never received full weights"):
        Receiver().load(plain_copy(policy), payload(policy, 1, 64, adapters_only=True))


def test_the_meter_sums_syncs_until_taken():
    m = SyncMeter()
    m.timed(lambda: None, 2.0)
    m.timed(lambda: None, 3.0)
    got = m.take()
    assert got["rollout/weight_sync_mb"] == 5.0 and got["rollout/weight_syncs"] == 2.0 and got["rollout/weight_sync_s"] >= 0
    assert m.take() == {}


def test_a_tied_tensor_travels_once(tiny):
    """The tiny model ties lm_head to the embeddings: the payload holds that tensor once (an alias names the other
    key) and the receiver loads both keys."""
    model, _ = tiny
    sd = model.state_dict()
    tied = [k for k in sd if k != "model.embed_tokens.weight" and sd[k].data_ptr() == sd["model.embed_tokens.weight"].data_ptr()]
    p = payload(model, 1, 64)
    assert tied and p.aliases == {k: "model.embed_tokens.weight" for k in tied}
    once = sum(v.numel() * v.element_size() for v in sd.values()) - sum(sd[k].numel() * sd[k].element_size() for k in tied)
    assert once < p.nbytes < once + 16384  # the tensors once, plus torch.save's headers
    twin = plain_copy(model)
    Receiver().load(twin, p)
    for k, v in plain_state_dict(model).items():
        assert torch.equal(twin.state_dict()[k], v)


def test_a_worker_given_full_weights_after_training_merges_later_adapters_once(tiny):
    """A LoRA worker that first loads full weights after the adapters moved (a replaced worker, or every worker
    of a re-formed broadcast group): the full payload carries the base unmerged and the adapters beside it, so
    the next adapter-only sync merges onto the base, not onto base + delta. The worker then holds the learner's
    plain weights bit for bit (merging onto the merged weights was off by up to ~0.3 here)."""
    pytest.importorskip("peft")
    from tracerl.config.model import LoraSettings
    from tracerl.models import lora

    model, _ = tiny
    policy = lora.attach_lora(copy.deepcopy(model), LoraSettings(r=4, alpha=8.0),
                              pointer={"path": "base", "gguf_file": None, "dtype": "float32", "relative": True})

    def update(seed):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for n, q in policy.named_parameters():
                if "lora_" in n:
                    q.add_(torch.randn(q.shape, generator=g) * 0.1)

    update(1)
    worker, rx = plain_copy(policy), Receiver()
    full = payload(policy, 5, 64)
    rx.load(worker, full)
    for k, v in plain_state_dict(policy).items():
        assert torch.equal(worker.state_dict()[k], v), k
    update(2)
    rx.load(worker, payload(policy, 6, 64, adapters_only=True))
    for k, v in plain_state_dict(policy).items():
        assert torch.equal(worker.state_dict()[k], v), k
