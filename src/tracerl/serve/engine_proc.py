"""One engine copy in its own process, for a gateway that fronts several (serve/engine_pool.py).

The process (spawned, `settings.threads` torch threads) holds its own copy of the policy (the plain
architecture of rollout/workers.py `worker_model`, through the engine `worker_engine` builds) and runs the
gateway's own sampling path on it: an `EngineWorker` batcher (serve/batcher.py) and `sample_rows`
(serve/rows.py), so a call samples exactly what the in-process gateway samples — a seeded call draws from
`Generator(seed)` alone, whatever process serves it. Messages in (`inbox`), answered in the order given:

- `("sample", request_id, args, kwargs)`: `sample_rows` on a thread of its own, answered `("rows", id, rows)`
  or `("error", id, status, message, code)`;
- `("weights", version, blob)`: the bytes of a state_dict, loaded between two batches (under the batcher's
  lock), answered `("loaded", version)`; `("version", v)` re-tags without weights; `("seed", s)` reseeds
  the batcher's generator (unseeded calls); `("stop",)` ends the process.

`EngineProcess` is the gateway's end: `sample(...)` blocks until answered; when the process dies, every call
waiting on it fails with `EngineDied` (the pool then retries it on another engine).
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import torch


class EngineDied(RuntimeError):
    """The engine process serving a call exited before answering it."""


class RemoteCallError(RuntimeError):
    """The engine process raised on a call: `status` (an HTTP status when it was an `APIError`) and `code`."""

    def __init__(self, status: int, message: str, code: str | None):
        super().__init__(message)
        self.status, self.code = status, code


class _Served:
    """What `sample_rows` reads from a gateway: the engine and its batching worker."""

    def __init__(self, engine, worker):
        self.engine, self.worker = engine, worker


def _engine_main(index: int, settings, inbox, outbox, max_batch: int, seed: int, timeout_s: float) -> None:
    from tracerl.rollout.workers import blob_state, exit_with_parent, worker_engine, worker_model
    from tracerl.serve.batcher import EngineTimeout, EngineWorker
    from tracerl.serve.errors import APIError
    from tracerl.serve.rows import sample_rows

    exit_with_parent(os.getppid())
    torch.set_num_threads(settings.threads)
    model = worker_model(settings).eval()
    engine = worker_engine(settings, model, settings.tokenizer)
    served = _Served(engine, EngineWorker(engine, max_batch=max_batch, seed=seed, timeout_s=timeout_s))
    calls = ThreadPoolExecutor(max(4, max_batch), thread_name_prefix=f"tracerl-engine{index}")

    def answer(rid: int, args: tuple, kwargs: dict) -> None:
        try:
            outbox.put(("rows", rid, sample_rows(served, *args, **kwargs)))
        except APIError as err:
            outbox.put(("error", rid, err.status, err.message, err.code))
        except EngineTimeout as err:
            outbox.put(("error", rid, 503, str(err), "engine_timeout"))
        except Exception as err:  # the engine failed on this call: a 500 at the gateway
            outbox.put(("error", rid, 500, f"{type(err).__name__}: {str(err)[:200]}", "engine_error"))

    outbox.put(("ready", os.getpid()))
    while True:
        msg = inbox.get()
        if msg[0] == "stop":
            break
        if msg[0] == "sample":
            calls.submit(answer, msg[1], msg[2], msg[3])
        elif msg[0] in ("weights", "version", "seed"):
            with served.worker.lock:  # between two batches
                if msg[0] == "weights":
                    model.load_state_dict(blob_state(msg[2]))
                if msg[0] == "seed":
                    served.worker._gen.manual_seed(int(msg[1]))
                else:
                    served.worker.policy_version = int(msg[1])
            if msg[0] == "weights":
                outbox.put(("loaded", int(msg[1])))
    served.worker.close()
    calls.shutdown(wait=False, cancel_futures=True)


class EngineProcess:
    """The gateway's end of one engine process (see the module docstring)."""

    def __init__(self, index: int, settings, *, max_batch: int = 16, seed: int = 0, timeout_s: float = 300.0):
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.index, self.timeout_s = index, timeout_s
        self.inbox, self.outbox = ctx.Queue(), ctx.Queue()
        self.proc = ctx.Process(target=_engine_main, args=(index, settings, self.inbox, self.outbox, max_batch, seed,
                                                          timeout_s), name=f"tracerl-gateway-engine-{index}", daemon=True)
        self.proc.start()
        self._ids = itertools.count()
        self._pending: dict[int, Future] = {}
        self._loaded: dict[int, threading.Event] = {}
        self._lock = threading.Lock()
        self.ready = threading.Event()
        self.dead = False
        self._reader = threading.Thread(target=self._read, name=f"tracerl-engine{index}-reader", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def alive(self) -> bool:
        return not self.dead and self.proc.exitcode is None

    def _read(self) -> None:
        while True:
            try:
                msg = self.outbox.get(timeout=0.2)
            except queue.Empty:
                if self.proc.exitcode is not None:
                    break
                continue
            except (EOFError, OSError, ValueError):
                break
            if msg[0] == "ready":
                self.ready.set()
            elif msg[0] == "loaded":
                with self._lock:
                    ev = self._loaded.pop(msg[1], None)
                if ev is not None:
                    ev.set()
            else:
                with self._lock:
                    fut = self._pending.pop(msg[1], None)
                if fut is None:
                    continue
                if msg[0] == "rows":
                    fut.set_result(msg[2])
                else:
                    fut.set_exception(RemoteCallError(msg[2], msg[3], msg[4]))
        self.dead = True  # every caller still waiting learns it now
        with self._lock:
            pending, self._pending = self._pending, {}
            loads, self._loaded = self._loaded, {}
        for fut in pending.values():
            fut.set_exception(EngineDied(f"engine {self.index} (pid {self.pid}) exited with code {self.proc.exitcode}"))
        for ev in loads.values():
            ev.set()

    def sample(self, *args, **kwargs) -> list[tuple]:
        """`sample_rows(gateway, *args, **kwargs)` on this engine: [(Sample, policy version, top log-probs)]."""
        fut: Future = Future()
        with self._lock:
            if self.dead:
                raise EngineDied(f"engine {self.index} is dead")
            rid = next(self._ids)
            self._pending[rid] = fut
        self.inbox.put(("sample", rid, args, kwargs))
        try:
            return fut.result(timeout=self.timeout_s + 5)
        except TimeoutError:
            with self._lock:
                self._pending.pop(rid, None)
            from tracerl.serve.batcher import EngineTimeout

            raise EngineTimeout(f"no sample within {self.timeout_s:g} s") from None

    def load(self, version: int, blob: bytes) -> threading.Event:
        """Send weights tagged `version`; the event is set once loaded (or once the process is found dead)."""
        ev = threading.Event()
        with self._lock:
            if self.dead:
                ev.set()
                return ev
            self._loaded[int(version)] = ev
        self.inbox.put(("weights", int(version), blob))
        return ev

    def tell(self, kind: str, value: int) -> None:
        """`version` (re-tag) or `seed` (reseed the unseeded calls' generator)."""
        if not self.dead:
            self.inbox.put((kind, int(value)))

    def close(self) -> None:
        if self.proc.exitcode is None:
            try:
                self.inbox.put(("stop",))
            except (OSError, ValueError):
                pass
            self.proc.join(timeout=5)
        if self.proc.exitcode is None:
            self.proc.kill()
            self.proc.join(timeout=5)
        self._reader.join(timeout=2)
        for q in (self.inbox, self.outbox):
            q.cancel_join_thread()
            q.close()


def engine_settings(model, tokenizer, *, threads: int = 1, engine: str = "torch", recipe=None):
    """What an engine process builds its copy from: the rollout workers' `WorkerSettings` (rollout/workers.py)
    for `model` — from the recipe when given (engine, dtype, autocast), else a torch engine in the model's dtype."""
    from tracerl.models.device import model_device
    from tracerl.models.weights import plain_architecture
    from tracerl.rollout.workers import WorkerSettings, param_dtype, worker_settings

    if recipe is not None:
        return worker_settings(model, tokenizer, recipe, None, {}, seed=0, partial=False, threads=threads)
    cls, config = plain_architecture(model)
    return WorkerSettings(cls, config, tokenizer, None, generator_seed=0, tokenizer_hashes={}, partial_rollouts=False,
                          threads=threads, device=str(model_device(model)), dtype=param_dtype(model), engine=engine)
