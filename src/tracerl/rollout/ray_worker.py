"""A rollout worker hosted in a Ray actor (`run.backend: ray`), answering the same calls as `ProcessWorker`.

The actor (`_Host`) runs the very loop a spawned worker process runs (`workers._worker_main`) in a
thread, between two in-memory queues: `put` hands it a message (weights by version, a job), `take`
returns what it produced (`started` / `done` events). Ray runs an actor's calls in several threads when
`max_concurrency` > 1 and does not keep their order then, so every message carries a sequence number
and the host releases them to the loop in the order they were sent (weights v, job k, weights v + 1
arrive as sent, as through a process's queue).

The driver side (`RayWorker`) never blocks on the actor: `events` keeps one `take` call outstanding
and collects it when it is ready. A dead actor (killed by `ray.kill`, by its pid, or whose loop raised)
makes that call fail with `RayActorError`; from then on `alive()` is False and the pool replaces the
worker as it replaces a dead process (`rollout/worker_pool.py`).
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
import traceback

from tracerl.rollout.workers import WorkerSettings, _worker_main


class _Host:
    """The actor: the worker loop in a thread, its inbox fed in send order."""

    def __init__(self, worker_id: int, settings: WorkerSettings, sys_path: list[str]):
        for p in sys_path:  # a local runtime's actors import what the driver imports (test envs, --import modules)
            if p not in sys.path and os.path.isdir(p):
                sys.path.append(p)
        self.inbox: queue.Queue = queue.Queue()
        self.outbox: queue.Queue = queue.Queue()
        self.next_seq, self.pending, self.lock = 0, {}, threading.Lock()
        self.thread = threading.Thread(target=self._main, args=(worker_id, settings), daemon=True,
                                       name=f"tracerl-rollout-{worker_id}")
        self.thread.start()

    def _main(self, worker_id: int, settings: WorkerSettings) -> None:
        try:
            _worker_main(worker_id, settings, self.inbox, self.outbox)
        except BaseException:  # the loop failed: the actor dies, as a worker process would exit
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)

    def put(self, seq: int, msg: tuple) -> None:
        if msg[0] == "weights" and hasattr(msg[2], "buckets"):  # a WeightsPayload of object refs: read them here
            import dataclasses

            import ray

            msg = (msg[0], msg[1], dataclasses.replace(msg[2], buckets=ray.get(list(msg[2].buckets))))
        with self.lock:
            self.pending[seq] = msg
            while self.next_seq in self.pending:
                self.inbox.put(self.pending.pop(self.next_seq))
                self.next_seq += 1

    def take(self, wait_s: float) -> list[tuple]:
        out = []
        try:
            out.append(self.outbox.get(timeout=wait_s))
            while True:
                out.append(self.outbox.get_nowait())
        except queue.Empty:
            pass
        return out

    def pid(self) -> int:
        return os.getpid()


_REMOTE = None
_STORED: dict = {}  # the last payload put in the object store: {id(payload): (payload, its copy of refs)}


def in_object_store(payload):
    """`payload` with each bucket `ray.put` once (the same refs for every actor it is sent to)."""
    import dataclasses

    import ray

    hit = _STORED.get(id(payload))
    if hit is None or hit[0] is not payload:
        _STORED.clear()
        refs = [b if isinstance(b, ray.ObjectRef) else ray.put(b) for b in payload.buckets]
        hit = _STORED[id(payload)] = (payload, dataclasses.replace(payload, buckets=refs))
    return hit[1]


def _remote_host():
    """`_Host` as a Ray actor class (made once): a long poll and sends may overlap, no restarts (the pool replaces)."""
    global _REMOTE
    if _REMOTE is None:
        import ray

        _REMOTE = ray.remote(max_concurrency=4, max_restarts=0)(_Host)
    return _REMOTE


class RayWorker:
    """A `RolloutWorker` whose loop runs in a Ray actor reserving `num_cpus` / `num_gpus`."""

    POLL_S = 0.2  # how long one outstanding `take` waits inside the actor before answering empty

    def __init__(self, worker_id: int, settings: WorkerSettings, *, num_cpus: float = 1.0, num_gpus: float = 0.0,
                 resources: dict[str, float] | None = None):
        import ray

        self._ray = ray
        self.worker_id = worker_id
        # resources: custom Ray resources (placement.rollout.resources, e.g. {"node_b": 1}: the nodes that have them)
        self.actor = _remote_host().options(num_cpus=num_cpus, num_gpus=num_gpus, resources=dict(resources or {})).remote(
            worker_id, settings, [os.path.abspath(p or ".") for p in sys.path])
        self.seq, self._take, self._dead, self._pid = 0, None, False, None
        self._ready: list[tuple] = []

    def _put(self, msg: tuple) -> None:
        if not self._dead:
            self.actor.put.remote(self.seq, msg)
            self.seq += 1

    def send_weights(self, version: int, blob) -> None:
        """Weights by version; a bucketed `WeightsPayload` travels through the object store, each bucket put
        once however many actors read it (`in_object_store`)."""
        self._put(("weights", version, in_object_store(blob) if hasattr(blob, "buckets") else blob))

    def join_broadcast(self, spec) -> None:
        """Join the weight-broadcast group (rollout/broadcast_sync.py), in order with weights and jobs."""
        self._put(("join", spec))

    def submit(self, job) -> None:
        self._put(("job", job))

    def events(self, timeout: float = 0.0) -> list[tuple]:
        deadline = time.time() + timeout
        while True:
            if self._ready:
                out, self._ready = self._ready, []
                return out
            if self._dead:
                return []
            if self._take is None:  # a long poll: the actor answers when an event arrives, or empty after POLL_S
                self._take = self.actor.take.remote(self.POLL_S)
            ready, _ = self._ray.wait([self._take], timeout=max(0.0, deadline - time.time()))
            if not ready:
                return []
            self._collect()
            if not self._ready and time.time() >= deadline:
                return []

    def _collect(self) -> None:
        ref, self._take = self._take, None
        try:
            self._ready += self._ray.get(ref)
        except self._ray.exceptions.RayActorError:  # the actor died: what it had not sent is lost with it,
            self._dead = True  # as with a dead process's queue (the pool re-issues its jobs)

    def alive(self) -> bool:
        if not self._dead and self._take is not None and self._ray.wait([self._take], timeout=0)[0]:
            self._collect()  # a finished poll may say the actor died (its events are kept for `events`)
        return not self._dead

    @property
    def pid(self) -> int | None:
        if self._pid is None and not self._dead:
            try:
                self._pid = self._ray.get(self.actor.pid.remote(), timeout=300)
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.GetTimeoutError):
                return None
        return self._pid

    def kill(self) -> None:
        """Kill the actor (tests; a lost node does the same)."""
        self._ray.kill(self.actor, no_restart=True)

    def close(self) -> None:
        try:
            self._ray.kill(self.actor, no_restart=True)
        except Exception:  # already gone, or the runtime is shutting down
            pass
        self._dead, self._take = True, None
