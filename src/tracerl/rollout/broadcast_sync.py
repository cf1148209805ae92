"""Weight sync over `torch.distributed` (`rollout.weight_sync: broadcast`): one broadcast from the sender to
every rollout worker, in the buckets of rollout/weight_sync.py.

The group is the sender (rank 0: the driver holding the learner's weights) and the N rollout workers (ranks
1..N: spawned processes or Ray actors), a process group of its own (never the default group, which a
distributed learner may hold): a `TCPStore` served by the sender on a free port of its node's address (Ray's
node address on Ray, so workers on other nodes reach it), gloo on CPU and NCCL when the sender and every
worker hold their weights on CUDA. `BroadcastSender.form` makes it: each worker is told its rank (a `join`
message, read by its loop as it reads weights and jobs); each checks in on the store, and once all have,
the sender says go and all build the group. A worker that dies before checking in makes the sender give
that generation up at once (the others are told, and leave it): the caller replaces the dead worker and
forms the group again, as it does when a worker dies later, under a new generation's key prefix of the
same store; the survivors leave the old group for the new one.

A sync (`BroadcastSender.sync`) is the payload's tensors (`weight_sync.sync_tensors`: plain weights, a tied
tensor once; or a LoRA policy's adapters only) cut into the same buckets as the other transports, each
bucket's tensors flattened into one buffer per dtype. Every worker first gets a `BroadcastPayload` (the
version, kind, aliases and each buffer's keys and shapes) through its ordinary inbox, then the buffers
arrive by broadcast, each sent as its bytes (so bfloat16 or bool need no support from the backend), and the
worker loads them through the same `Receiver` as the other transports: the same tensors, bit for bit. A
broadcast reaches every member, so a sync goes to every worker of the group (a fresh member makes it a
full one for all).
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import socket
import time

import torch
import torch.distributed as dist

from tracerl.rollout.weight_sync import WeightsPayload, _groups, sync_tensors

_TIMEOUT = datetime.timedelta(minutes=10)  # a worker still starting (spawn, imports, its model) joins within this
_PREFIX = "tracerl-weights"


def backend_for(sender_device, worker_device) -> str:
    """nccl when the sender's weights and the workers' engines are both on CUDA, gloo otherwise."""
    return "nccl" if str(sender_device).startswith("cuda") and str(worker_device).startswith("cuda") else "gloo"


def _group(store, rank: int, world: int, backend: str):
    if backend == "nccl":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = _TIMEOUT
        return dist.ProcessGroupNCCL(store, rank, world, opts)
    if os.environ.get("GLOO_SOCKET_IFNAME"):  # the user's choice of interface
        return dist.ProcessGroupGloo(store, rank, world, _TIMEOUT)
    opts = dist.ProcessGroupGloo._Options()  # gloo on this node's address, not what the host name resolves to
    opts._timeout = _TIMEOUT  # (a loopback address here would be unreachable from other nodes)
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname=node_address())]
    return dist.ProcessGroupGloo(store, rank, world, opts)


def node_address() -> str:
    """This node's address as other nodes reach it: Ray's node address on Ray, else the host name's, else loopback."""
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except ImportError:
        pass
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


@dataclasses.dataclass
class GroupSpec:
    """What a worker needs to join the group (picklable: it travels in the worker's inbox)."""

    addr: str
    port: int
    rank: int
    world: int
    generation: int
    backend: str

    def connect(self):
        """This worker's side of the group, once every member checked in (None when the sender gave this
        generation up: a member died before joining, and a new generation follows)."""
        if self.backend == "nccl":
            torch.cuda.set_device(0)  # a worker sees its own GPU(s): the first is cuda:0
        store = dist.PrefixStore(f"{_PREFIX}/{self.generation}",
                                 dist.TCPStore(self.addr, self.port, is_master=False, timeout=_TIMEOUT))
        store.set(f"ready/{self.rank}", "1")
        store.wait(["go"])
        if store.get("go") != b"ok":
            return None
        return _group(dist.PrefixStore("pg", store), self.rank, self.world, self.backend)


@dataclasses.dataclass
class BroadcastPayload:
    """One version announced to a worker before its tensors arrive over the group: per bucket, per dtype,
    the keys and shapes packed (in order) into that dtype's buffer."""

    version: int
    kind: str
    layout: list  # [[(dtype name, [(key, shape), ...]), ...] per bucket]
    aliases: dict
    nbytes: int

    @property
    def mb(self) -> float:
        return self.nbytes / 2**20

    def receive(self, group, device: str = "cpu") -> WeightsPayload:
        """The tensors of every buffer, broadcast by rank 0, as a `WeightsPayload` of tensor buckets."""
        buckets = []
        for bucket in self.layout:
            out = {}
            for dtype, entries in bucket:
                sizes = [math.prod(shape) for _, shape in entries]
                flat = torch.empty(sum(sizes), dtype=getattr(torch, dtype), device=device)
                group.broadcast([flat.view(torch.uint8)]).wait()
                for (key, shape), part in zip(entries, flat.split(sizes)):
                    out[key] = part.view(shape)
            buckets.append(out)
        return WeightsPayload(self.version, buckets, self.kind, self.nbytes, dict(self.aliases))


def flat_payload(model, version: int, bucket_mb: float, *, adapters_only: bool = False, device: str = "cpu"):
    """(the `BroadcastPayload` announcing `version`, the buffers to broadcast in order): each bucket's tensors
    flattened per dtype, in the order the keys first appear."""
    tensors, kind, aliases = sync_tensors(model, adapters_only=adapters_only)
    layout, buffers = [], []
    for bucket in _groups(tensors, bucket_mb):
        by_dtype: dict[torch.dtype, list[str]] = {}
        for k, v in bucket.items():
            by_dtype.setdefault(v.dtype, []).append(k)
        entry = []
        for dtype, keys in by_dtype.items():
            entry.append((str(dtype).removeprefix("torch."), [(k, tuple(bucket[k].shape)) for k in keys]))
            buffers.append(torch.cat([bucket[k].reshape(-1) for k in keys]).to(device))
        layout.append(entry)
    nbytes = sum(b.numel() * b.element_size() for b in buffers)
    return BroadcastPayload(int(version), kind, layout, aliases, nbytes), buffers


class BroadcastSender:
    """Rank 0 of the weight-broadcast group: forms it with a list of workers, re-forms it when they change."""

    def __init__(self, backend: str = "gloo", device: str = "cpu"):
        self.backend, self.device = backend, device
        self.store = self.group = None
        self.addr, self.generation, self.members = "", 0, []

    def form(self, workers: list) -> None:
        """A group of this sender and `workers` (ranks 1..N, each told through `join_broadcast`)."""
        if self.store is None:
            self.addr = node_address()
            self.store = dist.TCPStore(self.addr, 0, is_master=True, wait_for_workers=False, timeout=_TIMEOUT)
        self.generation += 1
        world = len(workers) + 1
        for rank, w in enumerate(workers, 1):
            w.join_broadcast(GroupSpec(self.addr, self.store.port, rank, world, self.generation, self.backend))
        self.group, self.members = None, []  # leave the old group (its dead member will not answer)
        store = dist.PrefixStore(f"{_PREFIX}/{self.generation}", self.store)
        ready, deadline = [f"ready/{r}" for r in range(1, world)], time.monotonic() + _TIMEOUT.total_seconds()
        while not store.check(ready):  # every member checked in, or one died first: then give this generation up
            dead = [r for r, w in enumerate(workers, 1) if not w.alive()]
            if dead or time.monotonic() > deadline:
                store.set("go", "abort")
                raise RuntimeError(f"rollout worker rank {dead[0]} died before joining the weight-broadcast group"
                                   if dead else f"the weight-broadcast group did not form in {_TIMEOUT}")
            time.sleep(0.02)
        store.set("go", "ok")
        if self.backend == "nccl":
            torch.cuda.set_device(torch.device(self.device))
        self.group = _group(dist.PrefixStore("pg", store), 0, world, self.backend)
        self.members = list(workers)

    def ensure(self, workers: list) -> bool:
        """Form the group again when its members are not `workers` (a first start, a replaced worker); True then."""
        if len(workers) == len(self.members) and all(a is b for a, b in zip(workers, self.members)):
            return False
        self.form(workers)
        return True

    def sync(self, workers: list, model, version: int, bucket_mb: float, *, adapters_only: bool = False):
        """`version` to every worker of the group (formed or re-formed first): the announcement through each
        inbox, then the buffers by broadcast. Returns the `BroadcastPayload` (its `mb`: one copy's)."""
        self.ensure(workers)
        dev = self.device if self.backend == "nccl" else "cpu"
        p, buffers = flat_payload(model, version, bucket_mb, adapters_only=adapters_only, device=dev)
        for w in workers:
            w.send_weights(version, p)
        for b in buffers:
            self.group.broadcast([b.view(torch.uint8)]).wait()
        return p

    def close(self) -> None:
        self.group = self.store = None
        self.members = []
