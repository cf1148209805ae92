"""N engine copies behind one gateway (`gateway.agent` with `rollout.workers: N`): routing, weights, replacement.

Routing. An episode's first call goes to the engine with the fewest calls in flight, ties broken round-robin
from a pointer that advances with every new episode (so two episodes that start one after the other still land
on two engines); every later call of that episode goes to the same engine (session affinity: its prefix is
what that engine last saw, the place a KV cache across calls would live). A call that names no episode goes
to the least-loaded engine. Each call's span records the engine that served it (`CallRecord.engine`).

Weights. `sync(model, version)` sends the policy's weights (`weights_blob`, rollout/workers.py) to every engine
and returns once each has loaded them between two of its batches: the sync RL loop calls it after each update
(`GatewayRollout.publish`) and before each step's episodes, so every call of a step is sampled by the version
the learner last pushed, on whichever engine. The pool keeps the last blob for replacements.

A dead engine. When an engine process dies, the calls waiting on it fail with `EngineDied` and each is
retried once, on the least-loaded live engine (its episode's affinity moves there): the agent sees a normal
answer, at the same policy version. The dead engine is replaced in the background by a fresh process,
loaded with the current weights before it takes calls; until then routing skips it. A call that finds no
live engine within its timeout, or whose retry dies too, fails with 503 `engine_died`.
"""

from __future__ import annotations

import threading
import time

from tracerl.serve.engine_proc import EngineDied
from tracerl.serve.episodes import BoundedDict


class EnginePool:
    """`factory(index, incarnation)` makes one engine (an `EngineProcess`); `n` of them, replaced when they die."""

    def __init__(self, factory, n: int, *, timeout_s: float = 300.0, max_replacements: int | None = None):
        if n < 1:
            raise ValueError("an engine pool needs at least one engine")
        self.factory, self.n, self.timeout_s = factory, n, timeout_s
        self.max_replacements = 3 * n if max_replacements is None else max_replacements
        self.incarnation = [0] * n
        self.engines = [factory(i, 0) for i in range(n)]
        self.live = [False] * n  # takes calls: started and holding the current weights
        self.inflight = [0] * n
        self.calls = [0] * n  # calls served per engine slot
        self.counters = {"engine_deaths": 0, "calls_retried": 0}
        self.version, self._blob = 0, None
        self.sync_s = 0.0
        self._affinity: BoundedDict = BoundedDict(65536)  # episode id -> engine index
        self._rr = 0
        self._cv = threading.Condition()
        self._sync_lock = threading.Lock()
        for i, e in enumerate(self.engines):
            if not e.ready.wait(timeout_s) or not e.alive():
                raise RuntimeError(f"gateway engine {i} did not start; see its traceback above")
            self.live[i] = True

    # ---- routing -----------------------------------------------------------------------------------------------
    def _pick(self, episode_id: str | None, avoid: int | None = None) -> int:
        deadline = time.monotonic() + self.timeout_s
        with self._cv:
            while True:
                for i in range(self.n):
                    if self.live[i] and not self.engines[i].alive():
                        self._died(i)
                ok = [i for i in range(self.n) if self.live[i] and i != avoid] or \
                     [i for i in range(self.n) if self.live[i]]
                if ok:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    from tracerl.serve.errors import APIError

                    raise APIError(503, f"no gateway engine was alive for {self.timeout_s:g} s (they are being "
                                   "replaced); retry the call later", type="server_error", code="engine_died")
                self._cv.wait(min(left, 0.5))
            held = self._affinity.get(episode_id) if episode_id else None
            if held is not None and held in ok and avoid is None:
                i = held
            else:
                i = min(ok, key=lambda j: (self.inflight[j], (j - self._rr) % self.n))
                if episode_id:
                    self._rr = (i + 1) % self.n
                    self._affinity[episode_id] = i
            self.inflight[i] += 1
            return i

    def sample(self, episode_id: str | None, *args, **kwargs) -> tuple[list[tuple], int]:
        """`sample_rows` on the episode's engine: (rows, index of the engine that served them)."""
        avoid = None
        for attempt in (0, 1):
            i = self._pick(episode_id, avoid)
            engine = self.engines[i]
            try:
                rows = engine.sample(*args, **kwargs)
                self.calls[i] += 1
                return rows, i
            except EngineDied:
                with self._cv:
                    if self.engines[i] is engine:
                        self._died(i)
                if attempt:
                    from tracerl.serve.errors import APIError

                    raise APIError(503, "the gateway engine serving this call died twice; retry the call",
                                   type="server_error", code="engine_died") from None
                self.counters["calls_retried"] += 1
                avoid = i
            finally:
                with self._cv:
                    self.inflight[i] -= 1
                    self._cv.notify_all()
        raise AssertionError("unreachable")

    # ---- deaths ------------------------------------------------------------------------------------------------
    def _died(self, i: int) -> None:
        """Engine `i` is dead (caller holds the condition): stop routing to it and replace it in the background."""
        if not self.live[i]:
            return
        self.live[i] = False
        self.counters["engine_deaths"] += 1
        if self.counters["engine_deaths"] > self.max_replacements:
            return  # no more replacements: the others carry on; none left gives 503 engine_died
        threading.Thread(target=self._replace, args=(i, self.engines[i]), name=f"tracerl-engine{i}-replace",
                         daemon=True).start()

    def _replace(self, i: int, dead) -> None:
        dead.close()
        self.incarnation[i] += 1
        fresh = self.factory(i, self.incarnation[i])
        if not fresh.ready.wait(self.timeout_s):
            fresh.close()
            return
        with self._sync_lock:  # the current weights before its first call; a sync after this one reaches it
            if self._blob is not None:
                fresh.load(self.version, self._blob).wait(self.timeout_s)
            with self._cv:
                self.engines[i] = fresh
                self.live[i] = fresh.alive()
                self._cv.notify_all()

    # ---- weights -----------------------------------------------------------------------------------------------
    def sync(self, model, version: int) -> bool:
        """Every engine to `model`'s weights as `version`; False (nothing sent) when they already hold it."""
        from tracerl.rollout.workers import weights_blob

        with self._sync_lock:
            if self._blob is not None and self.version == int(version):
                return False
            t0 = time.perf_counter()
            self._blob, self.version = weights_blob(model), int(version)
            self._push()
            self.sync_s += time.perf_counter() - t0
        return True

    def push_state(self, state_dict, version: int) -> None:
        """A state_dict already checked against the policy's (a `POST /v1/weights`) to every engine."""
        import io

        import torch

        buf = io.BytesIO()
        torch.save({k: v.detach().to("cpu") for k, v in state_dict.items()}, buf)
        with self._sync_lock:
            self._blob, self.version = buf.getvalue(), int(version)
            self._push()

    def _push(self) -> None:
        events = [e.load(self.version, self._blob) for e in self.engines]
        for ev in events:
            ev.wait(self.timeout_s)  # a dead engine sets it too: its replacement loads the blob itself

    def tell(self, kind: str, value: int) -> None:
        """`version` (re-tag every engine, weights unchanged) or `seed` (engine i's unseeded calls: seed + i)."""
        if kind == "version":
            self.version = int(value)
        for i, e in enumerate(self.engines):
            e.tell(kind, int(value) + (i if kind == "seed" else 0))

    def metrics(self) -> dict[str, float]:
        s, self.sync_s = self.sync_s, 0.0
        return {"gateway/engines": float(self.n), "gateway/engine_deaths": float(self.counters["engine_deaths"]),
                "gateway/calls_retried": float(self.counters["calls_retried"]), "gateway/weight_sync_s": s}

    def close(self) -> None:
        for e in self.engines:
            e.close()
