"""Weight sync by broadcast (rollout/broadcast_sync.py, `rollout.weight_sync: broadcast`): the flat per-dtype
layout, a real gloo group of the sender and two workers (threads of this process, each its own rank), the
same tensors bit for bit as the object-store / queue format, LoRA adapters only, the group re-formed after
a worker is replaced, and the recipe key's refusals."""

import queue
import threading

import pytest
import torch

from tracerl.config import load_recipe
from tracerl.errors import UserError
from tracerl.models.weights import plain_copy
from tracerl.rollout.broadcast_sync import BroadcastSender, backend_for, flat_payload
from tracerl.rollout.weight_sync import Receiver, payload


class ThreadWorker:
    """A rank in a thread: joins the group, then receives each announced version (as a worker's loop does)."""

    def __init__(self):
        self.inbox, self.loaded, self.got = queue.Queue(), queue.Queue(), {}
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def join_broadcast(self, spec):
        self.inbox.put(("join", spec))

    def send_weights(self, version, p):
        self.inbox.put(("weights", version, p))

    def alive(self):
        return True

    def _loop(self):
        group = None
        while True:
            msg = self.inbox.get()
            if msg[0] == "join":
                group = msg[1].connect()
            else:
                self.got[msg[1]] = msg[2].receive(group)
                self.loaded.put(msg[1])

    def wait(self, version):
        assert self.loaded.get(timeout=60) == version
        return self.got[version]


class Two(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(2, 3)
        self.register_buffer("n", torch.arange(4))


def test_each_bucket_is_one_flat_buffer_per_dtype():
    """plain_state_dict's order is n (4 int64, 32 B), l.weight (3x2 float32, 24 B), l.bias (3 floats, 12 B);
    in buckets of 30 B: [n] (alone: larger than a bucket), [weight], [bias] (24 + 12 > 30); 32 + 24 + 12 = 68 B
    in all. One bucket of 1 MiB: an int64 buffer of 4 values then a float32 buffer of 9."""
    m = Two()
    p, bufs = flat_payload(m, 5, 30 / 2**20)
    assert p.layout == [[("int64", [("n", (4,))])], [("float32", [("l.weight", (3, 2))])],
                        [("float32", [("l.bias", (3,))])]]
    assert p.nbytes == 68 and p.version == 5 and p.kind == "full"
    p, bufs = flat_payload(m, 5, 1)
    assert p.layout == [[("int64", [("n", (4,))]), ("float32", [("l.weight", (3, 2)), ("l.bias", (3,))])]]
    assert [b.dtype for b in bufs] == [torch.int64, torch.float32] and [b.numel() for b in bufs] == [4, 9]
    assert torch.equal(bufs[1], torch.cat([m.l.weight.detach().reshape(-1), m.l.bias.detach()]))


def _same(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


def test_a_broadcast_delivers_the_object_store_tensors_bit_for_bit_and_reforms(tiny):
    """Two workers get version 3 over a gloo group (buckets of 0.01 MiB: several); each one's tensors are those
    the object-store payload carries, the tied lm_head included once (an alias). Worker 1 then is replaced: the
    group is formed again (generation 2) and version 4 reaches both."""
    model, _ = tiny
    sender, workers = BroadcastSender(), [ThreadWorker(), ThreadWorker()]
    p = sender.sync(workers, model, 3, 0.01)
    ref = Receiver().state(payload(model, 3, 0.01))
    for w in workers:
        _same(Receiver().state(w.wait(3)), ref)
    assert len(p.layout) > 1 and p.aliases and sender.generation == 1
    assert p.nbytes == sum(v.numel() * v.element_size() for k, v in ref.items() if k not in p.aliases)
    twin = plain_copy(model)
    for q in twin.parameters():
        q.data.zero_()
    Receiver().load(twin, workers[0].got[3])  # the worker's load: the learner's weights
    _same(twin.state_dict(), plain_copy(model).state_dict())
    assert not sender.ensure(workers)  # the same members: no new group
    workers[1] = ThreadWorker()
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    try:
        sender.sync(workers, model, 4, 0.01)
        assert sender.generation == 2
        ref = Receiver().state(payload(model, 4, 0.01))
        for w in workers:
            _same(Receiver().state(w.wait(4)), ref)
    finally:
        with torch.no_grad():
            next(model.parameters()).sub_(1.0)
    sender.close()


class DiesBeforeJoining:
    def join_broadcast(self, spec):
        pass

    def alive(self):
        return False


def test_a_worker_that_dies_before_joining_gives_the_generation_up_at_once(tiny):
    """Worker 2 is dead before it checks in: `form` raises within a second (not after the store's 10-minute
    timeout), worker 1 is told to leave that generation, and the next one (with a live replacement) works."""
    import time

    model, _ = tiny
    sender, alive = BroadcastSender(), ThreadWorker()
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="rank 2 died before joining"):
        sender.form([alive, DiesBeforeJoining()])
    assert time.monotonic() - t0 < 5 and sender.members == []
    workers = [alive, ThreadWorker()]
    sender.sync(workers, model, 1, 64)
    assert sender.generation == 2
    for w in workers:
        _same(Receiver().state(w.wait(1)), Receiver().state(payload(model, 1, 64)))
    sender.close()


def test_lora_sends_its_adapters_only_and_merges_as_the_object_store(tiny):
    """A LoRA policy (r 4): adapters only (A, B, float64 scaling, bool fan_in_fan_out per layer), a fraction of
    the full sync; the merged weights the worker computes equal those from the object-store payload."""
    from tracerl.config.model import LoraSettings
    from tracerl.models import lora

    model, _ = tiny
    import copy

    policy = lora.attach_lora(copy.deepcopy(model), LoraSettings(r=4, alpha=8.0),
                              pointer={"path": "x", "gguf_file": None, "dtype": "float32", "relative": True})
    with torch.no_grad():
        for n, q in policy.named_parameters():
            if "lora_B" in n:
                q.normal_()
    sender, w = BroadcastSender(), [ThreadWorker()]
    full = sender.sync(w, policy, 1, 64)
    small = sender.sync(w, policy, 2, 64, adapters_only=True)
    assert small.kind == "lora" and small.nbytes < full.nbytes / 4
    assert {d for b in small.layout for d, _ in b} == {"float32", "float64", "bool"}
    rx, ref = Receiver(), Receiver()
    rx.state(w[0].wait(1))
    ref.state(payload(policy, 1, 64))
    _same(rx.state(w[0].wait(2)), ref.state(payload(policy, 2, 64, adapters_only=True)))
    sender.close()


def test_the_backend_follows_the_devices():
    assert backend_for("cuda:0", "cuda") == "nccl"
    assert backend_for("cpu", "cuda") == backend_for("cuda:0", "cpu") == backend_for("cpu", "cpu") == "gloo"


@pytest.mark.parametrize("overrides, words", [
    (["rollout.weight_sync=broadcast"], "nothing to move"),
    (["rollout.workers=2", "rl.mode=async", "rollout.weight_sync=broadcast"], "rl.mode: async"),
    (["run.backend=ray", "rollout.weight_sync=broadcast"], "one rollout worker"),
    (["rollout.workers=2", "rollout.weight_sync=object_store"], "set rollout.weight_sync=queue"),
    (["rollout.workers=2", "run.backend=ray", "rollout.weight_sync=queue"], "set rollout.weight_sync=object_store"),
])
def test_transports_a_mode_cannot_use_are_refused_in_one_sentence(overrides, words):
    with pytest.raises(UserError, match=words):
        load_recipe("smoke", overrides)


def test_the_default_is_the_backends_own_transport():
    assert load_recipe("smoke", []).rollout.weight_sync is None
    assert load_recipe("smoke", ["rollout.workers=2", "rollout.weight_sync=broadcast"]).rollout.weight_sync == "broadcast"


def test_a_worker_process_samples_the_broadcast_weights_as_the_queued_ones(tiny):
    """The real worker loop (`workers._worker_main`): a spawned worker joins the group, loads version 2 by
    broadcast, and samples a job from a fixed generator state; an in-process worker loaded from the queue's
    payload samples the same tokens (the same weights, bit for bit)."""
    import copy

    from tracerl.envs import get_env
    from tracerl.rollout import LoopBudgets
    from tracerl.rollout.workers import InProcessWorker, ProcessWorker, RolloutJob, Runner, SpecRef, worker_settings

    model, tok = tiny
    learner = copy.deepcopy(model)
    with torch.no_grad():
        for q in learner.parameters():
            q.add_(0.01 * torch.randn(q.shape, generator=torch.Generator().manual_seed(q.numel())))
    spec = get_env("math_tool")
    tasks = spec.generate("train", 2, 1)
    state = torch.Generator().manual_seed(5).get_state()
    job = RolloutJob(0, tasks, ["g0", "g1"], seed=3, budgets=LoopBudgets(max_turns=2, max_new_tokens=8),
                     sampling={"temperature": 1.0}, generator_state=state)
    twin = plain_copy(model)
    ref = InProcessWorker(0, Runner(twin, tok, spec, generator_seed=0, tokenizer_hashes={}))
    ref.send_weights(2, payload(learner, 2, 64))
    ref.submit(job)
    want = [t.token_ids for t in next(e[1] for e in ref.events() if e[0] == "done").trajectories]
    settings = worker_settings(learner, tok, load_recipe("smoke", []), SpecRef("math_tool"), {}, seed=0, partial=False)
    w, sender = ProcessWorker(0, settings), BroadcastSender()
    try:
        sender.sync([w], learner, 2, 64)
        w.submit(job)
        res = None
        for _ in range(600):
            res = next((e[1] for e in w.events(0.5) if e[0] == "done"), None)
            if res is not None or not w.alive():
                break
        assert res is not None and res.start_version == 2
        assert [t.token_ids for t in res.trajectories] == want and any(len(t) for t in want)
    finally:
        w.close()
        sender.close()
